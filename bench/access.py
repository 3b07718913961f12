"""Issue #28: what OAuth tokens and cost accounting cost (`make bench BENCH=access`).

1. Token validation on a warm request (JWKS cached): `authenticate` of an RS256 access token in process, beside
   an API key's (one SQLite point read); and over HTTP, `current_identity` with the token beside the key.
2. Cost accounting on `memory_recall` (2,000 memories, fresh query each call): the same call through the
   dispatch path in process with the accounting on, and with it switched off (the meter, the store guards'
   charges and the token estimates replaced by no-ops), interleaved; and with a quota in force (a counter taken
   per request) beside none. The authorization server is the tests' (tests/oauth_server.py), on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.latency import MCP_HEADERS, pct
from bench.locomo import turns_and_questions
from engram.api import dispatch
from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.families import find
from engram.kernel import kinds, metering
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.trust.quotas import QuotaLimits
from engram.wiring import Engram, build_local
from tests.oauth_server import running_auth_server

SAMPLES = 2000
HTTP_SAMPLES = 400
RECALLS = 400
MEMORIES = 2000


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def tokens_part(engram: Engram, url: str, key: str) -> dict[str, Any]:
    with running_auth_server() as auth:
        policy = {"issuer": auth.issuer, "audience": [f"{url}/mcp"], "grant": ["org/bench"]}
        engram.identity.trust_issuer(None, policy, "bench")
        token = auth.mint(aud=f"{url}/mcp", scope="engram:agent engram:grant:org/bench/user/alice", lifetime=86400)
        engram.identity.authenticate(token)  # the JWKS fetched once
        fetched = auth.jwks_fetches
        in_token = timed(lambda: engram.identity.authenticate(token), SAMPLES)
        in_key = timed(lambda: engram.identity.authenticate(key), SAMPLES)
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "current_identity", "arguments": {}},
        }
        with httpx.Client(timeout=30) as http:
            over: dict[str, list[float]] = {"token": [], "key": []}
            for i in range(HTTP_SAMPLES * 2):
                which = "token" if i % 2 else "key"
                bearer = token if which == "token" else key
                t = time.perf_counter()
                r = http.post(url + "/mcp", json=body, headers=MCP_HEADERS | {"Authorization": f"Bearer {bearer}"})
                over[which].append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200 and '"isError":false' in r.text.replace(" ", ""), r.text[:300]
        assert auth.jwks_fetches == fetched, "the JWKS was fetched again on a warm path"
    return {
        "token_validation_in_process_ms": {"p50": pct(in_token, 50), "p99": pct(in_token, 99)},
        "api_key_in_process_ms": {"p50": pct(in_key, 50), "p99": pct(in_key, 99)},
        "current_identity_http_token_ms": {"p50": pct(over["token"], 50), "p99": pct(over["token"], 99)},
        "current_identity_http_key_ms": {"p50": pct(over["key"], 50), "p99": pct(over["key"], 99)},
        "jwks_fetches_during_the_run": auth.jwks_fetches - fetched,
        "target_ms": 1.0,
    }


@contextlib.contextmanager
def accounting_off() -> Iterator[None]:
    """The accounting replaced by no-ops: no meter, no charges, no token estimates."""
    saved = (dispatch.metering, kinds.charge, metering.charge, dispatch.tokens)
    dispatch.metering = lambda cost: contextlib.nullcontext(cost)  # type: ignore[assignment,misc,return-value]
    kinds.charge = metering.charge = lambda *a, **k: None  # type: ignore[assignment]
    dispatch.tokens = lambda value: 0  # type: ignore[assignment]
    try:
        yield
    finally:
        dispatch.metering, kinds.charge, metering.charge, dispatch.tokens = saved  # type: ignore[assignment]


def accounting_part(engram: Engram, key: str) -> dict[str, Any]:
    turns, questions = turns_and_questions()
    principal = engram.identity.authenticate(key)
    caller = engram.identity.enter(principal, "bench", ANY, "bench")
    store = find("memory_store_batch")
    recall = find("memory_recall")
    assert store is not None and recall is not None
    for i in range(0, MEMORIES, 100):
        batch = [{"content": turns[(i + j) % len(turns)], "session_id": f"s{(i + j) // 20}"} for j in range(100)]
        store.run(
            engram.family_services(store.family), caller, store.input.model_validate({"turns": batch}), lambda *_: None
        )
    engram.queue.join()
    loop = asyncio.new_event_loop()
    counter = iter(range(10**9))

    def one() -> None:
        q = f"{questions[next(counter) % len(questions)]} ({next(counter)})"  # a fresh text: no cached answer
        args = recall.input.model_validate({"query": q, "context_id": "bench"})
        loop.run_until_complete(dispatch.run(engram, recall, principal, args, lambda *_: None))

    timed(one, 50)  # warm
    on: list[float] = []
    off: list[float] = []
    quota: list[float] = []
    for i in range(RECALLS):
        if i % 2:
            with accounting_off():
                off += timed(one, 1)
        else:
            on += timed(one, 1)
    engram.quotas.set("bench", None, QuotaLimits(requests_per_minute=10**8), "bench")
    quota += timed(one, RECALLS // 2)
    loop.close()
    return {
        "memory_recall_in_process_accounting_on_ms": {"p50": pct(on, 50), "p99": pct(on, 99)},
        "memory_recall_in_process_accounting_off_ms": {"p50": pct(off, 50), "p99": pct(off, 99)},
        "accounting_cost_p50_ms": round(pct(on, 50) - pct(off, 50), 3),
        "memory_recall_with_a_request_quota_ms": {"p50": pct(quota, 50), "p99": pct(quota, 99)},
        "memories": MEMORIES,
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp)))
        key, _ = engram.identity.create_key(["bench"], "agent", ["org/bench"])
        with in_thread(create_app(engram)) as url:
            out = {"tokens": tokens_part(engram, url, key)}
        out["accounting"] = accounting_part(engram, key)
        return out
