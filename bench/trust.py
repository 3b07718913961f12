"""Issue #49: what trust by the book costs (`make bench BENCH=trust`).

1. Token validation, warm (JWKS cached, no principal cache): `TokenVerifier.verify` of an RS256 and an EdDSA access
   token through PyJWT on `cryptography`, in process — the whole check: parsing, the issuer's policies, the
   signature against each context's own keys, times, audience, grant.
2. An audit append with the keyed chain: `Auditor.record` on SQLite (one IMMEDIATE transaction: the entry, HMAC-
   SHA256 under the deployment's key, and the high-water mark in the attached `audit-mark.db`), in process.
3. `audit_verify` of the log written (every entry's HMAC checked, and the mark), per 1,000 entries.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519

from bench.access import timed
from bench.latency import pct

SAMPLES = 2000


class _Keys:
    """A KeySource with one issuer's keys (the JWKS as fetched, already cached: what a warm request sees)."""

    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self._keys = keys

    def keys(self, issuer: str, jwks_uri: str | None, refresh: bool = False) -> list[dict[str, Any]]:
        return self._keys


def tokens_part() -> dict[str, Any]:
    import jwt
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from engram.kernel.clock import SystemClock
    from engram.trust.oauth import IssuerPolicy, Issuers, TokenVerifier
    from engram.trust.signing import b64
    from tests.oauth_server import AuthServer, rsa_jwk

    server = AuthServer()  # its key and minting only; nothing is served
    ed = ed25519.Ed25519PrivateKey.generate()
    ed_jwk = {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "alg": "EdDSA",
              "x": b64(ed.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))}  # fmt: skip
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        from engram.adapters.local.sqlite_records import SqliteRecordStore

        issuers = Issuers(SqliteRecordStore(Path(tmp) / "r.db"), SystemClock())
        policy = IssuerPolicy(issuer=server.issuer, audience=["https://engram.example/mcp"], grant=["org/acme/user"])
        issuers.put("acme", policy)
        verifier = TokenVerifier(issuers, _Keys([rsa_jwk(server.key, server.kid), ed_jwk]), SystemClock())
        claims = {"aud": "https://engram.example/mcp", "scope": "engram:agent engram:grant:org/acme/user/alice"}
        now = int(time.time())
        body = {"iss": server.issuer, "sub": "alice", "iat": now, "exp": now + 86400, **claims}
        for name, token in (
            ("rs256", server.mint(lifetime=86400, **claims)),
            ("eddsa", jwt.encode(body, ed, algorithm="EdDSA", headers={"kid": "ed"})),
        ):
            verifier.verify(token)  # warm: policies read, key objects built
            samples = timed(lambda token=token: verifier.verify(token), SAMPLES)
            out[f"token_validation_{name}_ms"] = {"p50": pct(samples, 50), "p99": pct(samples, 99)}
    return out


def audit_part() -> dict[str, Any]:
    from engram.adapters.local.sqlite_audit import SqliteAuditLog
    from engram.kernel.clock import SystemClock, new_id
    from engram.trust.audit import Auditor, Chain

    with tempfile.TemporaryDirectory() as tmp:
        auditor = Auditor(SqliteAuditLog(Path(tmp) / "audit.db"), SystemClock(), 365, Chain(lambda: b"k" * 32))
        objects = [new_id("turn"), "Person:jane smith"]  # one id Engram made, one kept as a keyed hash

        def append() -> None:
            auditor.record("bench", key_id="key_0123456789ab", principal="agent", tool="memory_recall",
                           transport="http", objects_=objects, outcome="ok",
                           cost={"server_ms": 1.2, "store_reads": 3})  # fmt: skip

        for _ in range(200):
            append()
        samples = timed(append, SAMPLES)
        t = time.perf_counter()
        report = auditor.verify("bench")
        verify_ms = (time.perf_counter() - t) * 1000
        assert report["ok"], report
        entries = int(report["entries"])
    return {
        "audit_append_keyed_ms": {
            "p50": pct(samples, 50),
            "p99": pct(samples, 99),
            "mean": round(statistics.fmean(samples), 4),
        },
        "audit_verify_ms_per_1000_entries": round(verify_ms / entries * 1000, 2),
        "audit_entries_verified": entries,
    }


def run() -> dict[str, Any]:
    return {**tokens_part(), **audit_part()}
