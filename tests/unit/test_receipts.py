"""Signed receipts (issue #27): Ed25519 over canonical JSON, checked offline, any change detected."""

from __future__ import annotations

import copy

from engram import ed25519
from engram.receipts import Signer, canonical, verify


def receipt() -> dict[str, object]:
    return {"request": "er_1", "subject": {"scope": "org/acme/user/alice"}, "erased": {"records": {"turn": 3}}}


def test_a_signed_receipt_verifies_with_its_key_and_the_published_one() -> None:
    signer = Signer(Signer.new_private_key())
    signed = signer.sign(receipt())
    assert signed["public_key"] == signer.public_key and signed["algorithm"] == "Ed25519"
    assert verify(signed) == (True, "signature valid")
    assert verify(signed, signer.public_key)[0]
    assert canonical(signed) == canonical({k: v for k, v in signed.items() if k != "signature"})


def test_any_change_or_another_key_fails() -> None:
    signer, other = Signer(Signer.new_private_key()), Signer(Signer.new_private_key())
    signed = signer.sign(receipt())
    tampered = copy.deepcopy(signed)
    tampered["erased"]["records"]["turn"] = 4  # type: ignore[index]
    assert verify(tampered) == (False, "the signature does not match the receipt's content")
    assert verify(dict(signed, public_key=other.public_key))[0] is False  # a key swapped in
    assert verify(signed, other.public_key) == (False, "signed with another key than the deployment's")
    assert verify(other.sign(receipt()), signer.public_key)[0] is False  # a receipt someone else made
    assert verify(dict(signed, signature="!!!"))[0] is False
    assert verify(receipt())[0] is False  # unsigned
    assert verify(dict(signed, algorithm="none"))[0] is False


def test_the_same_private_key_makes_the_same_public_key() -> None:
    key = Signer.new_private_key()
    assert Signer(key).public_key == Signer(key).public_key and len(key) == 32


# RFC 8032, section 7.1, tests 1 and 2
RFC_VECTORS = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46b"
        "d25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c"
        "387b2eaeb4302aeeb00d291612bb0c00",
    ),
]


def test_ed25519_matches_rfc_8032_vectors() -> None:
    for secret, public, message, signature in RFC_VECTORS:
        sk, msg = bytes.fromhex(secret), bytes.fromhex(message)
        assert ed25519.public_key(sk).hex() == public
        assert ed25519.sign(sk, msg).hex() == signature
        assert ed25519.verify(bytes.fromhex(public), msg, bytes.fromhex(signature))
        assert not ed25519.verify(bytes.fromhex(public), msg + b"x", bytes.fromhex(signature))


def test_ed25519_agrees_with_cryptography_both_ways() -> None:
    """The pure-Python signer against the `cryptography` package (a test dependency), on random keys."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

    for n in range(5):
        theirs = Ed25519PrivateKey.generate()
        sk = theirs.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        pk = theirs.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        message = f"receipt {n}".encode() * (n + 1)
        assert ed25519.public_key(sk) == pk
        assert ed25519.sign(sk, message) == theirs.sign(message)  # Ed25519 is deterministic
        Ed25519PublicKey.from_public_bytes(pk).verify(ed25519.sign(sk, message), message)  # raises if not
        assert ed25519.verify(pk, message, theirs.sign(message))
