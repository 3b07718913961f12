"""Ed25519 signatures (RFC 8032) with `cryptography` (pyca, on OpenSSL): receipts and audit checkpoints.

Keys travel as base64url of their raw 32 bytes. Verification refuses a public key of small order before it
asks OpenSSL: RFC 8032's cofactorless check (OpenSSL's, like most) accepts a trivial signature — R the
identity, S = 0 — for every message under such a key, so a document "signed" by one proves nothing. The check
is a comparison with the eight small-order encodings and their non-canonical twins (the list libsodium's
`crypto_sign_verify_detached` refuses), not curve arithmetic.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

_SMALL_ORDER = frozenset(
    bytes.fromhex(h)
    for h in (
        "00" * 32,  # order 4
        "01" + "00" * 31,  # the identity (order 1)
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",  # order 8
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",  # order 8
        "ec" + "ff" * 30 + "7f",  # p - 1 (order 2)
        "ed" + "ff" * 30 + "7f",  # p, a non-canonical 0 (order 4)
        "ee" + "ff" * 30 + "7f",  # p + 1, a non-canonical 1 (order 1)
    )
)


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    """base64url with or without padding; ValueError for anything else."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ValueError("not base64url") from exc


def small_order_ed25519(public_b64: str) -> bool:
    """Whether a base64url Ed25519 public key is one of small order (or not 32 bytes at all)."""
    try:
        raw = unb64(public_b64)
    except ValueError:
        return True
    return len(raw) != 32 or bytes(raw[:31]) + bytes([raw[31] & 0x7F]) in _SMALL_ORDER


class Ed25519Signer:
    """One Ed25519 private key (its raw 32 bytes)."""

    def __init__(self, private_key: bytes) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(bytes(private_key))
        self.public_key = b64(self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))

    @staticmethod
    def new_private_key() -> bytes:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        return Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())

    def sign(self, message: bytes) -> str:
        """The base64url signature of `message`."""
        return b64(self._key.sign(message))


def ed25519_verify(public_b64: str, message: bytes, signature_b64: str) -> bool:
    """Whether `signature_b64` is the signature of `message` by the key `public_b64` (False for a key of
    small order, or anything malformed)."""
    if small_order_ed25519(public_b64):
        return False
    try:
        key = Ed25519PublicKey.from_public_bytes(unb64(public_b64))
        key.verify(unb64(signature_b64), message)
    except (InvalidSignature, ValueError):
        return False
    return True
