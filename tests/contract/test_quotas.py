"""Issue #28, quotas on both adapter sets: counters that stay exact under many concurrent callers at the limit
(SQLite transactions; DynamoDB conditional updates), windows that start again when they expire, admission
that takes nothing when it refuses and gives a failed call's write back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engram.kernel.clock import FixedClock
from engram.kernel.errors import RateLimited
from engram.trust.quotas import QuotaLimits, Quotas, Ticket
from engram.wiring import Engram
from tests.concurrency import together


def test_a_counter_never_passes_its_limit_under_concurrent_adds(both: Engram) -> None:
    counters = both.counters
    assert counters is not None
    now = both.clock.now()
    got: list[int | None] = []
    errors = together(32, lambda i: got.append(counters.add("t:exact", 1, 10, now + timedelta(minutes=5), now)))
    assert not errors
    assert sum(v is not None for v in got) == 10 and sorted(v for v in got if v is not None) == list(range(1, 11))
    assert counters.value("t:exact", now) == 10
    assert counters.add("t:exact", -3, None, now + timedelta(minutes=5), now) == 7  # given back
    assert counters.add("t:exact", 4, 10, now + timedelta(minutes=5), now) is None  # 11 > 10: refused, unchanged
    assert counters.value("t:exact", now) == 7


def test_an_expired_window_starts_again(both: Engram) -> None:
    counters = both.counters
    assert counters is not None
    now = both.clock.now()
    assert counters.add("t:window", 5, 5, now + timedelta(seconds=30), now) == 5
    assert counters.add("t:window", 1, 5, now + timedelta(seconds=30), now) is None
    later = now + timedelta(minutes=1)
    assert counters.value("t:window", later) == 0
    assert counters.add("t:window", 1, 5, later + timedelta(seconds=30), later) == 1
    assert counters.add("t:forever", 7, None, None, now) == 7 and counters.value("t:forever", later) == 7


def test_admission_is_exact_at_the_boundary_and_refuses_with_the_time_to_wait(
    both: Engram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the middle of this minute, held: 24 callers through the emulator can outlast a minute's window (the count of
    # requests per minute then read 0 in the next one: a fresh clone's run met it)
    monkeypatch.setattr(both.quotas, "_clock", FixedClock(both.clock.now().replace(second=30, microsecond=0)))
    both.quotas.set("acme", None, QuotaLimits(writes_per_day=5), "test")
    both.quotas.set("acme", "key_a", QuotaLimits(requests_per_minute=1000), "test")
    tickets: list[Ticket] = []
    refused: list[RateLimited] = []

    def call(i: int) -> None:
        try:
            tickets.append(both.quotas.admit("acme", "key_a", True, lambda: 10))
        except RateLimited as exc:
            refused.append(exc)

    assert not together(24, call)
    assert (len(tickets), len(refused)) == (5, 19)
    exc = refused[0]
    assert exc.status == 429 and exc.code == "quota_exceeded" and 0 < exc.retry_after <= 86_401
    assert exc.details["quota"] == "writes_per_day" and exc.details["scope"] == "context"
    use = both.quotas.use("acme", None)
    assert use["writes_per_day"] == {"limit": 5, "used": 5}
    assert both.quotas.use("acme", "key_a")["requests_per_minute"]["used"] == 24  # refused calls were requests too
    tickets[0].failed()  # a call that failed wrote nothing: its write comes back
    assert both.quotas.use("acme", None)["writes_per_day"]["used"] == 4
    both.quotas.admit("acme", "key_a", True, lambda: 10)
    with pytest.raises(RateLimited):
        both.quotas.admit("acme", "key_a", True, lambda: 10)
    both.quotas.admit("acme", "key_a", False, lambda: 10)  # reads are not writes
    both.quotas.admit("acme", "key_b", False, lambda: 10)


def test_stored_bytes_and_embeddings(both: Engram) -> None:
    both.quotas.set("acme", "key_s", QuotaLimits(stored_bytes=100, embeddings_per_day=3), "test")
    both.quotas.admit("acme", "key_s", True, lambda: 60)
    with pytest.raises(RateLimited) as over:
        both.quotas.admit("acme", "key_s", True, lambda: 60)  # 120 > 100
    assert over.value.details["quota"] == "stored_bytes" and over.value.details["scope"] == "key"
    both.quotas.admit("acme", "key_s", True, lambda: 40).done(embeddings=3)
    with pytest.raises(RateLimited) as spent:
        both.quotas.admit("acme", "key_s", False, lambda: 0)
    assert spent.value.details["quota"] == "embeddings_per_day"
    assert both.quotas.use("acme", "key_s")["stored_bytes"] == {"limit": 100, "used": 100}


def test_the_settings_defaults_hold_until_management_sets_others(both: Engram) -> None:
    quotas = Quotas(both.records, both.counters, both.clock, QuotaLimits(), QuotaLimits(requests_per_minute=2))
    for _ in range(2):
        quotas.admit("acme", "key_d", False, lambda: 0)
    with pytest.raises(RateLimited) as over:
        quotas.admit("acme", "key_d", False, lambda: 0)
    assert over.value.details["quota"] == "requests_per_minute" and 0 < over.value.retry_after <= 61
    quotas.set("acme", "key_d", QuotaLimits(requests_per_minute=4), "test")
    quotas.admit("acme", "key_d", False, lambda: 0)  # the third request of the minute: now allowed
    assert quotas.limits("acme", "key_e").requests_per_minute == 2  # every other key keeps the default
    assert quotas.limits("acme", None).requests_per_minute is None  # and the context has no limit


def test_concurrent_quota_setters_and_issuer_trusts_all_land(both: Engram) -> None:
    """Many concurrent writers of the same quota record and of the same issuer's document (one per issuer,
    shared by every context that trusts it): none fails, none is lost."""
    limits = [QuotaLimits(writes_per_day=100 + i) for i in range(12)]
    assert not together(12, lambda i: both.quotas.set("acme", "key_same", limits[i], "t"))
    both.quotas._cache.clear()
    assert both.quotas.limits("acme", "key_same").writes_per_day in {100 + i for i in range(12)}
    assert not together(12, lambda i: both.quotas.set("acme", f"key_{i}", limits[i], "t"))
    both.quotas._cache.clear()
    assert [both.quotas.limits("acme", f"key_{i}").writes_per_day for i in range(12)] == [100 + i for i in range(12)]
    issuer = "https://auth.example.com/"
    policy = {"issuer": issuer, "audience": ["https://engram.example.com/mcp"], "grant": ["org/x"]}
    assert not together(12, lambda i: both.identity.trust_issuer(None, policy, f"tenant-{i}"))
    trusted = both.identity.issuers.for_issuer(issuer)
    assert sorted(trusted) == sorted(f"tenant-{i}" for i in range(12))
