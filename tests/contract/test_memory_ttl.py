"""#53: memories that expire, on both adapter sets — stored with `ttl_seconds` or `expires_at`, never recalled after,
swept by a job (the turn, the facts it gave, its text in its session) and counted in the trail; the validity window
of a fact that superseded or was superseded stays as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram.kernel.clock import Clock
from engram.kernel.errors import InvalidInput
from engram.wiring import Engram
from tests.contract.conftest import two_agents


class Moved(Clock):
    """The system clock, moved forward on demand (the sweep runs when the queue's clock says the job is due)."""

    def __init__(self) -> None:
        self.ahead = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.ahead


def call(e: Engram, caller: object, tool: str, arguments: dict[str, object]) -> dict[str, object]:
    out = e.call(caller, tool, arguments)  # as a client's call reaches the operation
    assert isinstance(out, dict)
    return out


def recalled(e: Engram, caller: object, query: str) -> list[str]:
    got = call(e, caller, "memory_recall", {"query": query, "k": 20, "mode": "bm25"})
    return [str(r["text"]) for r in got["results"]]  # type: ignore[index, union-attr]


def test_an_expired_memory_is_never_recalled_and_is_swept(both: Engram) -> None:
    e = both
    clock = Moved()
    e.memory.clock = e.queue.clock = clock  # type: ignore[attr-defined]
    alice, _ = two_agents(e)
    call(e, alice, "memory_store", {"content": "I live in Paris.", "session_id": "s"})
    out = call(e, alice, "memory_store", {"content": "I am staying at the Hilton this week.", "session_id": "s",
                                          "ttl_seconds": 3600})  # fmt: skip
    assert out["expires_at"]
    assert any("Hilton" in t for t in recalled(e, alice, "where am I staying hilton"))
    clock.ahead = timedelta(hours=2)
    assert not any("Hilton" in t for t in recalled(e, alice, "where am I staying hilton"))  # before any sweep
    e.queue.join()
    assert e.records.get("acme", "turn", str(out["turn_id"])) is None
    session = next(i for i in e.records.query("acme", "session").items if i.data["session_id"] == "s")
    assert "Hilton" not in session.data["last_text"]
    paris = [f for f in e.memory.timeline(alice, None, None, 100)["facts"] if f["value"] == "Paris"]
    assert paris and paris[0]["valid_until"] is None  # another fact's window: untouched
    rows = e.audit.usage("acme", clock.now() - timedelta(days=1), clock.now() + timedelta(days=1))
    swept = [r for r in rows if r["tool"] == "memory_expire"]
    assert swept and swept[0]["cost"]["expired"] >= 1


def test_a_time_to_live_is_checked(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    with pytest.raises(InvalidInput):
        call(e, alice, "memory_store", {"content": "x", "expires_at": past})
    with pytest.raises(InvalidInput):
        call(e, alice, "memory_store", {"content": "x", "ttl_seconds": 60, "expires_at": "2099-01-01T00:00:00Z"})
