"""JSON Web Signatures as OAuth access tokens carry them (RFC 7515 compact form), verified in pure Python.

RS256 / RS384 / RS512 (RSASSA-PKCS1-v1_5, keys of 2,048 bits or more) and EdDSA (Ed25519, `engram.ed25519`)
need no native package, so the Lambda authorizer verifies tokens with the engram layer alone; an RSA check is
one modular exponentiation (e = 65537: ~0.05 ms). ES256 is verified with `cryptography` where it is installed
(the web layer, the local server). `none`, HMAC (a shared secret is not a resource server's to hold) and
anything else are refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from engram import ed25519


class BadToken(ValueError):
    """A token that is not a well-formed, well-signed JWS; the message says what (never the token)."""


# DER DigestInfo prefixes of RFC 8017 section 9.2, note 1
_DIGEST_INFO = {
    "RS256": (hashlib.sha256, bytes.fromhex("3031300d060960864801650304020105000420")),
    "RS384": (hashlib.sha384, bytes.fromhex("3041300d060960864801650304020205000430")),
    "RS512": (hashlib.sha512, bytes.fromhex("3051300d060960864801650304020305000440")),
}
ALGORITHMS = (*_DIGEST_INFO, "EdDSA", "ES256")
MAX_TOKEN = 16_384  # characters; real access tokens are a few hundred to a few thousand
MIN_RSA_BITS = 2048


def b64url(text: str) -> bytes:
    """base64url without padding (RFC 7515 section 2), strictly: no other characters."""
    if not text or len(text) % 4 == 1 or not set(text) <= _B64URL:
        raise BadToken("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadToken("not base64url") from None


_B64URL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadToken(f"the token's {what} is not JSON") from None
    if not isinstance(value, dict):
        raise BadToken(f"the token's {what} is not a JSON object")
    return value


def parse(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """(header, claims, signing input, signature) of a compact JWS, before any check of the signature."""
    if len(token) > MAX_TOKEN:
        raise BadToken("token too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise BadToken("not a JWT (three base64url parts)")
    header = _json_object(b64url(parts[0]), "header")
    claims = _json_object(b64url(parts[1]), "claims")
    signature = b64url(parts[2]) if parts[2] else b""
    if header.get("alg") not in ALGORITHMS:
        raise BadToken(f"algorithm {str(header.get('alg'))[:20]!r} is not accepted")
    if "crit" in header:
        raise BadToken("critical header parameters are not understood")
    return header, claims, f"{parts[0]}.{parts[1]}".encode(), signature


def _int(jwk: dict[str, Any], name: str) -> int:
    value = jwk.get(name)
    if not isinstance(value, str):
        raise BadToken(f"the key has no {name}")
    return int.from_bytes(b64url(value), "big")


def verify(alg: str, jwk: dict[str, Any], signing_input: bytes, signature: bytes) -> bool:
    """Whether `signature` is `jwk`'s signature of `signing_input` under `alg`. Raises BadToken for a key
    that cannot be used with `alg` (wrong type, an RSA modulus under 2,048 bits)."""
    if jwk.get("alg") not in (None, alg) or jwk.get("use") not in (None, "sig"):
        raise BadToken("the key is not for this algorithm")
    if alg in _DIGEST_INFO:
        if jwk.get("kty") != "RSA":
            raise BadToken("the key is not an RSA key")
        return _rsa_pkcs1(alg, _int(jwk, "n"), _int(jwk, "e"), signing_input, signature)
    if alg == "EdDSA":
        if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
            raise BadToken("the key is not an Ed25519 key")
        public = b64url(str(jwk.get("x", "")))
        return len(public) == 32 and len(signature) == 64 and ed25519.verify(public, signing_input, signature)
    if alg == "ES256":
        return _es256(jwk, signing_input, signature)
    raise BadToken(f"algorithm {alg!r} is not accepted")


def _rsa_pkcs1(alg: str, n: int, e: int, message: bytes, signature: bytes) -> bool:
    if n.bit_length() < MIN_RSA_BITS:
        raise BadToken(f"RSA keys under {MIN_RSA_BITS} bits are not accepted")
    if e < 3 or e % 2 == 0:
        raise BadToken("the RSA key's exponent is not valid")
    size = (n.bit_length() + 7) // 8
    s = int.from_bytes(signature, "big")
    if len(signature) != size or s >= n:
        return False
    digest, prefix = _DIGEST_INFO[alg]
    t = prefix + digest(message).digest()
    expected = b"\x00\x01" + b"\xff" * (size - len(t) - 3) + b"\x00" + t
    return pow(s, e, n).to_bytes(size, "big") == expected


def _es256(jwk: dict[str, Any], message: bytes, signature: bytes) -> bool:
    if jwk.get("kty") != "EC" or jwk.get("crv") != "P-256":
        raise BadToken("the key is not a P-256 key")
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
    except ImportError:
        raise BadToken("ES256 is not available here (no cryptography package)") from None
    if len(signature) != 64:
        return False
    try:
        key = ec.EllipticCurvePublicNumbers(_int(jwk, "x"), _int(jwk, "y"), ec.SECP256R1()).public_key()
    except ValueError:
        raise BadToken("the key is not a point of P-256") from None
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    try:
        key.verify(der, message, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
