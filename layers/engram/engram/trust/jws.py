"""JSON Web Signatures as OAuth access tokens carry them (RFC 7515 compact form), checked by PyJWT.

PyJWT (on `cryptography`, i.e. OpenSSL) parses the token and verifies its signature, always with an explicit
one-algorithm list taken from the key Engram chose, never from the token alone: RS256 / RS384 / RS512 (keys of
2,048 bits or more), ES256 (P-256) and EdDSA (Ed25519). `none`, HMAC (a shared secret is not a resource
server's to hold) and anything else are refused before any key is looked at. What is Engram's own here is
policy, not cryptography: the size bound, the algorithm allow-list, `crit`, the minimum RSA size, and a JWK
pinned to another algorithm or use.

Keys built from JWKs are kept (by their JSON) so a warm check costs one signature verification. PyJWT is
imported on the first token (`parser`), not with this module: a function that only ever sees API keys (most
authorizer calls) does not pay for it at a cold start; with SnapStart the import is in the snapshot.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jwt.api_jws import PyJWS


class BadToken(ValueError):
    """A token that is not a well-formed, well-signed JWS; the message says what (never the token)."""


ALGORITHMS = ("RS256", "RS384", "RS512", "EdDSA", "ES256")
MAX_TOKEN = 16_384  # characters; real access tokens are a few hundred to a few thousand
MIN_RSA_BITS = 2048
_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
_KTY = {"RS256": "RSA", "RS384": "RSA", "RS512": "RSA", "EdDSA": "OKP", "ES256": "EC"}


@functools.cache
def parser() -> PyJWS:
    """PyJWT's JWS parser, allowed only Engram's algorithms (made once, on first use)."""
    from jwt.api_jws import PyJWS

    return PyJWS(algorithms=list(ALGORITHMS))


def parse(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) of a compact JWS, before any check of its signature. Raises BadToken for anything
    that is not a JWS of an accepted algorithm with a JSON object for its claims."""
    if len(token) > MAX_TOKEN:
        raise BadToken("token too long")
    if token.count(".") != 2 or not set(token) <= _CHARS:  # base64url parts only: no padding, no spaces
        raise BadToken("not a JWT (three base64url parts)")
    import jwt

    try:
        header = parser().get_unverified_header(token)
        payload = parser().decode_complete(token, options={"verify_signature": False})["payload"]
        claims = json.loads(payload)
    except (jwt.PyJWTError, ValueError, RecursionError):
        raise BadToken("the token is not a well-formed JWS") from None
    if not isinstance(claims, dict):
        raise BadToken("the token's claims are not a JSON object")
    if header.get("alg") not in ALGORITHMS:
        raise BadToken(f"algorithm {str(header.get('alg'))[:20]!r} is not accepted")
    if "crit" in header:
        raise BadToken("critical header parameters are not understood")
    return header, claims


def verify(alg: str, jwk: dict[str, Any], token: str) -> bool:
    """Whether `token` is signed by `jwk` under `alg`. Raises BadToken for a key that cannot be used with
    `alg` (wrong type or curve, pinned to another algorithm or use, an RSA modulus under 2,048 bits)."""
    if alg not in ALGORITHMS:
        raise BadToken(f"algorithm {alg[:20]!r} is not accepted")
    if jwk.get("alg") not in (None, alg) or jwk.get("use") not in (None, "sig") or jwk.get("kty") != _KTY[alg]:
        raise BadToken("the key is not for this algorithm")
    import jwt

    key = _key(json.dumps(jwk, sort_keys=True), alg)
    try:
        parser().decode_complete(token, key=key, algorithms=[alg])
    except jwt.InvalidSignatureError:
        return False
    except jwt.PyJWTError:
        raise BadToken("the token is not a well-formed JWS") from None
    return True


@functools.lru_cache(maxsize=256)
def _key(jwk_json: str, alg: str) -> Any:
    """The public key object of a JWK for `alg` (PyJWT's JWK parsing), checked against Engram's policy."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from engram.trust.signing import small_order_ed25519

    jwk = json.loads(jwk_json)
    try:
        key = jwt.PyJWK(jwk, algorithm=alg).key
    except (jwt.PyJWTError, ValueError, TypeError, KeyError):
        raise BadToken("the key is not a usable key for this algorithm") from None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise BadToken(f"RSA keys under {MIN_RSA_BITS} bits are not accepted")
    if alg == "EdDSA" and (jwk.get("crv") != "Ed25519" or small_order_ed25519(str(jwk.get("x", "")))):
        raise BadToken("the key is not an Ed25519 key of full order")
    return key
