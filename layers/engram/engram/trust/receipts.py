"""Signed receipts (issue #27): a JSON document signed with the deployment's Ed25519 key (`engram.trust.signing`),
checkable offline with the published public key.

A receipt is a JSON object; its signature covers its canonical form (sorted keys, no spaces, UTF-8) without
the `signature` field. The receipt names the public key that made it (`public_key`, base64url of the raw 32
bytes), but a key inside a document proves nothing about who signed it — anyone can sign a receipt with a key of
their own — so a receipt is valid only against the key the deployment publishes (`current_identity`,
`/.well-known/engram-receipt-key`), pinned by the checker. Nothing here reads the environment or a file: the
private key comes from the wiring (`engram.wiring`), which keeps it where the deployment keeps secrets.
"""

from __future__ import annotations

import json
from typing import Any

from engram.trust.signing import Ed25519Signer, ed25519_verify

ALGORITHM = "Ed25519"


def canonical(document: dict[str, Any]) -> bytes:
    """What a signature covers: the document without its `signature`, as canonical JSON."""
    body = {k: v for k, v in document.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Signer:
    """Signs receipts with one Ed25519 private key (32 raw bytes)."""

    def __init__(self, private_key: bytes) -> None:
        self._signer = Ed25519Signer(private_key)
        self.public_key = self._signer.public_key

    @staticmethod
    def new_private_key() -> bytes:
        return Ed25519Signer.new_private_key()

    def sign(self, document: dict[str, Any]) -> dict[str, Any]:
        """`document` with `algorithm`, `public_key` and `signature` (base64url) added."""
        body = dict(document, algorithm=ALGORITHM, public_key=self.public_key)
        return dict(body, signature=self._signer.sign(canonical(body)))


def verify(receipt: dict[str, Any], public_key: str | None) -> tuple[bool, str]:
    """(valid, why): the receipt is signed by `public_key`, the deployment's published key. Without a key
    to check against nothing is valid: the receipt's own `public_key` could be anyone's."""
    if receipt.get("algorithm") != ALGORITHM or not isinstance(receipt.get("signature"), str):
        return False, "not a signed receipt (no Ed25519 signature)"
    if public_key is None:
        return False, "no deployment key to check against (give --public-key, or --url of the deployment)"
    if receipt.get("public_key") != public_key:
        return False, "signed with another key than the deployment's"
    if not ed25519_verify(public_key, canonical(receipt), str(receipt["signature"])):
        return False, "the signature does not match the receipt's content"
    return True, "signature valid"
