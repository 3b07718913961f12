"""Signed receipts (issue #27): Ed25519 over canonical JSON, checked offline against the deployment's pinned key,
any change detected; Ed25519 through `cryptography` (#49), keys of small order refused."""

from __future__ import annotations

import copy

from engram.trust.receipts import Signer, canonical, verify
from engram.trust.signing import Ed25519Signer, b64, ed25519_verify, small_order_ed25519


def receipt() -> dict[str, object]:
    return {"request": "er_1", "subject": {"scope": "org/acme/user/alice"}, "erased": {"records": {"turn": 3}}}


def test_a_signed_receipt_verifies_with_its_key_and_the_published_one() -> None:
    signer = Signer(Signer.new_private_key())
    signed = signer.sign(receipt())
    assert signed["public_key"] == signer.public_key and signed["algorithm"] == "Ed25519"
    assert verify(signed, signer.public_key) == (True, "signature valid")
    assert canonical(signed) == canonical({k: v for k, v in signed.items() if k != "signature"})


def test_any_change_or_another_key_fails() -> None:
    signer, other = Signer(Signer.new_private_key()), Signer(Signer.new_private_key())
    signed = signer.sign(receipt())
    tampered = copy.deepcopy(signed)
    tampered["erased"]["records"]["turn"] = 4  # type: ignore[index]
    assert verify(tampered, signer.public_key) == (False, "the signature does not match the receipt's content")
    assert verify(dict(signed, public_key=other.public_key), signer.public_key)[0] is False  # a key swapped in
    assert verify(signed, other.public_key) == (False, "signed with another key than the deployment's")
    assert verify(other.sign(receipt()), signer.public_key)[0] is False  # a receipt someone else made
    assert verify(dict(signed, signature="!!!"), signer.public_key)[0] is False
    assert verify(receipt(), signer.public_key)[0] is False  # unsigned
    assert verify(dict(signed, algorithm="none"), signer.public_key)[0] is False


def test_without_a_pinned_key_no_receipt_is_valid() -> None:
    """#49: the key inside a receipt is anyone's; a receipt re-signed by another key was called valid."""
    forger = Signer(Signer.new_private_key())
    forged = forger.sign(receipt())
    assert verify(forged, None) == (
        False,
        "no deployment key to check against (give --public-key, or --url of the deployment)",
    )
    assert verify(forged, forger.public_key)[0]  # only a checker who pins the forger's key is fooled


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
        signer, msg = Ed25519Signer(bytes.fromhex(secret)), bytes.fromhex(message)
        assert signer.public_key == b64(bytes.fromhex(public))
        assert signer.sign(msg) == b64(bytes.fromhex(signature))
        assert ed25519_verify(signer.public_key, msg, b64(bytes.fromhex(signature)))
        assert not ed25519_verify(signer.public_key, msg + b"x", b64(bytes.fromhex(signature)))


SMALL_ORDER = ["00" * 32, "01" + "00" * 31, "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
               "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", "ec" + "ff" * 30 + "7f"]  # fmt: skip


def test_a_small_order_public_key_with_a_trivial_signature_is_refused() -> None:
    """#49: under a key of small order, R = the identity and S = 0 "signs" every message (RFC 8032's
    cofactorless equation holds; OpenSSL itself accepts it). Such a key never verifies anything here."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    identity = bytes.fromhex("01" + "00" * 31)
    trivial = identity + bytes(32)
    Ed25519PublicKey.from_public_bytes(identity).verify(trivial, b"any receipt")  # the library alone: accepted
    for hexkey in SMALL_ORDER:
        for sign_bit in (0, 0x80):
            raw = bytearray(bytes.fromhex(hexkey))
            raw[31] |= sign_bit
            assert small_order_ed25519(b64(bytes(raw)))
            assert not ed25519_verify(b64(bytes(raw)), b"any receipt", b64(trivial))
    forged = dict(receipt(), algorithm="Ed25519", public_key=b64(identity), signature=b64(trivial))
    assert verify(forged, b64(identity))[0] is False
    real = Ed25519Signer(Ed25519Signer.new_private_key())
    assert not small_order_ed25519(real.public_key) and ed25519_verify(real.public_key, b"m", real.sign(b"m"))
