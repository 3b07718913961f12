"""Signed receipts (issue #27): a JSON document signed with the deployment's Ed25519 key, checkable offline
with the published public key alone.

A receipt is a JSON object; its signature covers its canonical form (sorted keys, no spaces, UTF-8) without
the `signature` field, and the receipt carries the public key that made it (`public_key`, base64url of the
raw 32 bytes) so that a checker can compare it with the key the deployment publishes (`current_identity`,
`/.well-known/engram-receipt-key`). Nothing here reads the environment or a file: the key comes from the
wiring (`engram.wiring`), which keeps it where the deployment keeps secrets.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from engram import ed25519
from engram.errors import InvalidInput

ALGORITHM = "Ed25519"


def canonical(document: dict[str, Any]) -> bytes:
    """What a signature covers: the document without its `signature`, as canonical JSON."""
    body = {k: v for k, v in document.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise InvalidInput("not base64url") from exc


class Signer:
    """Signs receipts with one Ed25519 private key (32 raw bytes)."""

    def __init__(self, private_key: bytes) -> None:
        self._key = bytes(private_key)
        self.public_key = _b64(ed25519.public_key(self._key))

    @staticmethod
    def new_private_key() -> bytes:
        return os.urandom(32)

    def sign(self, document: dict[str, Any]) -> dict[str, Any]:
        """`document` with `algorithm`, `public_key` and `signature` (base64url) added."""
        body = dict(document, algorithm=ALGORITHM, public_key=self.public_key)
        return dict(body, signature=_b64(ed25519.sign(self._key, canonical(body))))


def verify(receipt: dict[str, Any], public_key: str | None = None) -> tuple[bool, str]:
    """(valid, why): the signature checks against the receipt's own key, and that key is `public_key` when
    one is given (the deployment's published key)."""
    if receipt.get("algorithm") != ALGORITHM or not isinstance(receipt.get("signature"), str):
        return False, "not a signed receipt (no Ed25519 signature)"
    key = receipt.get("public_key")
    if not isinstance(key, str):
        return False, "the receipt names no public key"
    if public_key is not None and key != public_key:
        return False, "signed with another key than the deployment's"
    try:
        valid = ed25519.verify(_unb64(key), canonical(receipt), _unb64(receipt["signature"]))
    except InvalidInput:
        valid = False
    return (True, "signature valid") if valid else (False, "the signature does not match the receipt's content")
