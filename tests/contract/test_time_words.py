"""#53: time in plain language, on both adapter sets — memory_recall, conversation_search and knowledge_search read
the query's time words (or since / until) relative to the request's time in the caller's time zone and say how
they read them. `since` / `until` are filters; memory_recall takes a time its query's words name as a preference
(what was said then ranks first: a question's "in 2021" is when a thing happened, which is often told later),
conversation_search and knowledge_search as a filter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram.families.knowledge.documents import NewDocument
from engram.kernel.caller import ANY
from engram.wiring import Engram
from tests.contract.conftest import two_agents


def call(e: Engram, caller: object, tool: str, arguments: dict[str, object]) -> dict[str, object]:
    out = e.call(caller, tool, arguments)  # as a client's call reaches the operation
    assert isinstance(out, dict)
    return out


def test_memory_recall_reads_two_days_ago_and_since(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    now = datetime.now(UTC)
    two_days = (now - timedelta(days=2)).replace(hour=12, minute=0, second=0, microsecond=0)
    ten_days = now - timedelta(days=10)
    e.memory.store(alice, e_turn("I bought oat milk at the market.", two_days), None)
    e.memory.store(alice, e_turn("I bought coffee beans at the market.", ten_days), None)
    e.memory.store(alice, e_turn("I bought a lamp at the market.", now - timedelta(minutes=5)), None)
    got = call(e, alice, "memory_recall", {"query": "what did I buy at the market two days ago", "k": 10})
    texts = [r["text"] for r in got["results"]]  # type: ignore[index, union-attr]
    assert "oat milk" in texts[0]  # said two days ago: first
    scores = [r["score"] for r in got["results"]]  # type: ignore[index, union-attr]
    assert all(0 <= x <= 1 for x in scores) and scores == sorted(scores, reverse=True)
    time = got["time"]
    assert time["read"] == "two days ago" and time["timezone"] == "UTC" and time["as"] == "preference"  # type: ignore[index]
    since = (now - timedelta(days=3)).isoformat()
    got = call(e, alice, "memory_recall", {"query": "what did I buy at the market", "since": since, "k": 10})
    texts = [r["text"] for r in got["results"]]  # type: ignore[index, union-attr]
    assert any("lamp" in t for t in texts) and not any("coffee" in t for t in texts)
    assert got["time"]["as"] == "filter"  # type: ignore[index]
    until = (now - timedelta(days=1)).isoformat()
    got = call(e, alice, "memory_recall", {"query": "what did I buy at the market two days ago", "until": until})
    texts = [r["text"] for r in got["results"]]  # type: ignore[index, union-attr]
    assert any("oat milk" in t for t in texts) and not any("coffee" in t or "lamp" in t for t in texts)  # both hold
    plain = call(e, alice, "memory_recall", {"query": "what did I buy at the market", "k": 10})
    assert "time" not in plain or plain["time"] is None  # no time words: no window, everything as before


def test_before_i_moved_is_read_from_memory(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    now = datetime.now(UTC)
    e.memory.store(alice, e_turn("I live in Paris and love the bakery on my street.", now - timedelta(days=90)), None)
    e.memory.store(alice, e_turn("I moved to Berlin.", now - timedelta(days=30)), None)
    e.memory.store(alice, e_turn("The bakery near my Berlin flat is great.", now - timedelta(days=2)), None)
    got = call(e, alice, "memory_recall", {"query": "the bakery before I moved", "k": 10, "mode": "bm25"})
    texts = [r["text"] for r in got["results"]]  # type: ignore[index, union-attr]
    assert "Paris" in texts[0], texts  # said before the move: first
    assert got["time"]["until"] is not None and got["time"]["read"] == "before I moved"  # type: ignore[index]


def test_conversation_and_knowledge_search_take_a_window_and_a_time_zone(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    call(e, alice, "conversation_append", {"thread_id": "t1", "role": "user", "content": "The invoice is late again."})
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    got = call(e, alice, "conversation_search", {"query": "invoice today", "timezone": "Pacific/Kiritimati"})
    assert got["time"]["timezone"] == "Pacific/Kiritimati"  # type: ignore[index]
    assert [r["content"] for r in call(e, alice, "conversation_search", {"query": "invoice"})["results"]]  # type: ignore[union-attr]
    assert call(e, alice, "conversation_search", {"query": "invoice", "since": tomorrow})["results"] == []
    # words in the query are a preference: what was said then first, nothing else dropped
    said = call(e, alice, "conversation_search", {"query": "invoice last year"})
    assert said["results"] and said["time"]["as"] == "preference"  # type: ignore[index]
    assert all(0 <= r["score"] <= 1 for r in said["results"])  # type: ignore[union-attr]
    e.documents.ingest(alice, NewDocument(b"The travel policy allows economy flights only.", "Travel"))
    e.queue.join()
    # a document's own times are words search matches ("policy in 1979"): only since / until choose when it came
    found = call(e, alice, "knowledge_search", {"query": "travel policy flights in 1979"})
    assert found["results"] and "time" not in found
    yesterday = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    found = call(e, alice, "knowledge_search", {"query": "travel policy flights", "until": yesterday})
    assert found["results"] == [] and found["time"]["as"] == "filter"  # type: ignore[index]
    assert call(e, alice, "knowledge_search", {"query": "travel policy flights", "since": yesterday})["results"]


def e_turn(text: str, said: datetime) -> object:
    from engram.families.memory.service import Turn

    return Turn(text, said_at=said)


_ = ANY
