"""The JWS checks OAuth tokens go through (`engram.trust.jws`, on PyJWT and `cryptography`): explicit algorithms, the
key's type and size, any change to a signed token fails."""

from __future__ import annotations

import base64

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from engram.trust import jws
from tests.oauth_server import rsa_jwk


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def check(token: str, jwk: dict[str, object]) -> bool:
    header, _ = jws.parse(token)
    return jws.verify(str(header["alg"]), dict(jwk), token)


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512"])
def test_rsa_signatures_verify_and_any_change_fails(alg: str) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = rsa_jwk(key, "k") | {"alg": alg}
    token = jwt.encode({"sub": "alice", "n": 1}, key, algorithm=alg)
    assert check(token, jwk)
    head, body, sig = token.split(".")
    other = jwt.encode({"sub": "mallory", "n": 1}, key, algorithm=alg).split(".")[1]
    assert not check(f"{head}.{other}.{sig}", jwk)  # another body under this signature
    raw = base64.urlsafe_b64decode(sig + "==")
    flipped = bytearray(raw)
    flipped[-1] ^= 1
    assert not check(f"{head}.{body}.{b64(bytes(flipped))}", jwk)
    assert not check(f"{head}.{body}.{b64(raw[:-1])}", jwk)  # a short signature


def test_small_rsa_keys_and_keys_of_another_type_are_refused() -> None:
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    token = jwt.encode({"sub": "a"}, small, algorithm="RS256")
    with pytest.raises(jws.BadToken, match="2048"):
        check(token, rsa_jwk(small, "k"))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode({"sub": "a"}, key, algorithm="RS256")
    with pytest.raises(jws.BadToken):
        check(token, {"kty": "OKP", "crv": "Ed25519", "x": b64(b"\0" * 32)})
    with pytest.raises(jws.BadToken):
        check(token, rsa_jwk(key, "k") | {"alg": "RS512"})  # a key pinned to another algorithm


def test_eddsa_and_es256() -> None:
    ed = ed25519.Ed25519PrivateKey.generate()
    raw = ed.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    token = jwt.encode({"sub": "a"}, ed, algorithm="EdDSA")
    assert check(token, {"kty": "OKP", "crv": "Ed25519", "x": b64(raw)})
    other = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert not check(token, {"kty": "OKP", "crv": "Ed25519", "x": b64(other)})
    with pytest.raises(jws.BadToken):  # a key of small order "verifies" a trivial signature of anything
        check(token, {"kty": "OKP", "crv": "Ed25519", "x": b64(bytes(32))})
    trivial = token.rsplit(".", 1)[0] + "." + b64(bytes.fromhex("01" + "00" * 31) + bytes(32))
    with pytest.raises(jws.BadToken):
        check(trivial, {"kty": "OKP", "crv": "Ed25519", "x": b64(bytes.fromhex("01" + "00" * 31))})
    with pytest.raises(jws.BadToken):  # an EdDSA token checked with an RSA key, or the key of another curve
        check(token, rsa_jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048), "k"))
    p256 = ec.generate_private_key(ec.SECP256R1())
    nums = p256.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-256", "x": b64(nums.x.to_bytes(32, "big")), "y": b64(nums.y.to_bytes(32, "big"))}
    token = jwt.encode({"sub": "a"}, p256, algorithm="ES256")
    assert check(token, jwk)
    other = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    assert not check(token, jwk | {"x": b64(other.x.to_bytes(32, "big")), "y": b64(other.y.to_bytes(32, "big"))})


@pytest.mark.parametrize(
    "token",
    [
        "",
        "a.b",
        "a.b.c.d",
        b64(b'{"alg":"none"}') + "." + b64(b"{}") + ".",
        b64(b'{"alg":"HS256"}') + "." + b64(b"{}") + "." + b64(b"x" * 32),
        b64(b'{"alg":"RS256","crit":["exp"]}') + "." + b64(b"{}") + "." + b64(b"x"),
        b64(b"[1]") + "." + b64(b"{}") + "." + b64(b"x"),
        b64(b'{"alg":"RS256"}') + "." + b64(b"not json") + "." + b64(b"x"),
        "e30=.e30.e30",  # padding is not base64url
        "x" * 20_000,
    ],
)
def test_malformed_tokens_are_refused_before_any_key_is_used(token: str) -> None:
    with pytest.raises(jws.BadToken):
        jws.parse(token)


def test_the_issuer_allow_list() -> None:
    from engram.trust.oauth import issuer_allowed

    allowed = ["https://login.example.com", "https://tenant.auth0.com/", "https://exact.example.org/realms/a"]
    assert issuer_allowed("https://login.example.com/oauth2/default", allowed)  # an origin: any path on it
    assert issuer_allowed("https://tenant.auth0.com/", allowed)
    assert issuer_allowed("https://tenant.auth0.com/.well-known/jwks.json", allowed)  # under an entry ending in /
    assert issuer_allowed("https://exact.example.org/realms/a", allowed)
    assert not issuer_allowed("https://exact.example.org/realms/b", allowed)  # an issuer URL: itself only
    assert not issuer_allowed("http://login.example.com/x", allowed)  # another scheme, another origin
    assert not issuer_allowed("https://login.example.com.evil.net/", allowed)
    assert not issuer_allowed("https://evil.net/?https://tenant.auth0.com/", allowed)
    assert not issuer_allowed("https://login.example.com/", [])
