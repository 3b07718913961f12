"""Cortex's conversations (`engram.families.conversation.service`) on both adapter sets: numbering under concurrent
appends, read-your-writes history, search, summaries that lose nothing, namespaces and scopes."""

from __future__ import annotations

import pytest

from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import EngramError, InvalidInput, NotFound
from engram.wiring import Engram
from tests.concurrency import together

ALICE, BOB = "org/acme/user/alice", "org/acme/user/bob"


def callers(e: Engram) -> tuple[Caller, Caller]:
    e.identity.register_scopes("acme", [ALICE, BOB, "org/acme/team/support"])
    keys = [e.identity.create_key(["acme"], "agent", [g])[1] for g in (ALICE, BOB)]
    alice, bob = (e.identity.enter(p, "acme", ANY, "t") for p in keys)
    return alice, bob


def test_append_history_and_read_your_writes(both: Engram) -> None:
    c, (alice, _) = both.conversation, callers(both)
    said = ["I can't access my account", "Happy to help. Can you give me your email?", "alice@example.com"]
    for n, text in enumerate(said):
        out = c.append(alice, "ticket-1", ("user", "assistant")[n % 2], text, {"n": n})
        assert out["thread_id"] == "ticket-1" and out["message_id"].startswith("msg_") and out["created_at"]
        history = c.history(alice, "ticket-1", 50, None, None)  # at once, every time
        assert [m["content"] for m in history["messages"]] == said[: n + 1]
    page = c.history(alice, "ticket-1", 2, None, None)
    assert [m["content"] for m in page["messages"]] == said[1:] and page["has_more"] is True
    first = c.history(alice, "ticket-1", 1, None, "2000-01-01T00:00:00Z")
    assert [m["content"] for m in first["messages"]] == said[:1] and first["has_more"] is True
    assert c.history(alice, "ticket-1", 50, "2000-01-01T00:00:00Z", None)["messages"] == []
    with pytest.raises(NotFound):
        c.history(alice, "no-such-thread", 50, None, None)
    with pytest.raises(InvalidInput):
        c.append(alice, "ticket-1", "robot", "hi", None)
    with pytest.raises(InvalidInput):
        c.history(alice, "ticket-1", 50, "yesterday", None)


def test_concurrent_appends_are_numbered_without_gaps(both: Engram) -> None:
    c, (alice, _) = both.conversation, callers(both)
    errors = together(20, lambda n: c.append(alice, "busy", "user", f"message number {n}", None))
    assert errors == []
    history = c.history(alice, "busy", 100, None, None)["messages"]
    assert sorted(m["content"] for m in history) == sorted(f"message number {n}" for n in range(20))
    items = both.records.query("acme", "message", limit=100).items
    assert sorted(i.data["n"] for i in items if i.data["thread_id"] == "busy") == list(range(1, 21))


def test_search_and_a_summary_that_loses_nothing(both: Engram) -> None:
    c, (alice, _) = both.conversation, callers(both)
    lines = [
        "My password reset email never arrived.",
        "Let me check the mail logs for your address.",
        "The reset mail bounced because the mailbox was full.",
        "I emptied the mailbox, please send it again.",
        "Sent again; the link is valid for one hour.",
        "It worked, I am logged in now.",
        "Great. Anything else I can do?",
        "No, thanks for the quick help.",
    ]
    for n, text in enumerate(lines):
        c.append(alice, "t-sum", ("user", "assistant")[n % 2], text, None)
    found = c.search(alice, "mailbox full bounced", "t-sum", None, 3)["results"]
    assert found and "bounced" in found[0]["content"] and 0 <= found[0]["score"] <= 1
    assert found[0]["thread_id"] == "t-sum" and found[0]["role"] == "user"
    out = c.summarize(alice, "t-sum", 3)
    assert out["original_count"] == 8 and out["compressed_count"] == 4 and out["summary"]
    default = c.history(alice, "t-sum", 50, None, None)["messages"]
    assert len(default) == 4 and default[0]["role"] == "system" and default[0]["content"] == out["summary"]
    assert [m["content"] for m in default[1:]] == lines[-3:]  # the summary stands where the others stood
    everything = c.history(alice, "t-sum", 50, None, None, include_compressed=True)["messages"]
    assert {m["content"] for m in everything} >= set(lines)  # nothing lost
    again = c.search(alice, "mailbox full bounced", "t-sum", None, 3)["results"]
    assert any("bounced" in r["content"] and r["compressed"] for r in again)  # still found


def test_namespaces_and_scopes(both: Engram) -> None:
    c, (alice, bob) = both.conversation, callers(both)
    c.append(bob, "shared-name", "user", "Bob's secret plan for the merger.", None)
    with pytest.raises(NotFound):
        c.history(alice, "shared-name", 50, None, None)
    assert c.search(alice, "secret plan merger", None, None, 10)["results"] == []
    c.append(alice, "shared-name", "user", "Alice's own thread of that name.", None)
    assert len(c.history(bob, "shared-name", 50, None, None)["messages"]) == 1
    with pytest.raises(EngramError) as info:
        c.append(alice, "t", "user", "hello", None, namespace="org/acme/team/support")  # outside her grant
    assert info.value.code == "namespace_error"
    with pytest.raises(EngramError) as info:
        c.search(alice, "hello", None, "org/acme/user/bob", 10)
    assert info.value.code == "namespace_error"
    c.append(alice, "t", "user", "in my own namespace", None, namespace=ALICE)
    assert c.search(alice, "own namespace", None, ALICE, 10)["results"]


def test_a_thread_can_feed_memory_with_what_the_user_says(both: Engram) -> None:
    c, (alice, _) = both.conversation, callers(both)
    c.append(alice, "chat", "user", "I live in Oslo.", None, extract_facts=True)
    c.append(alice, "chat", "assistant", "I work at Initech.", None)  # the assistant's words are not facts
    c.append(alice, "chat", "user", "My favorite color is teal.", None)  # the thread keeps asking
    c.append(alice, "quiet", "user", "I live in Rome.", None)  # another thread did not ask
    texts = {h["text"] for h in both.memory.recall(alice, "where do I live, what do I like", k=20)["results"]}
    assert any("Oslo" in t for t in texts) and any("teal" in t for t in texts)
    assert not any("Rome" in t or "Initech" in t for t in texts), texts


def test_a_failing_embedder_is_an_embedding_error_and_writes_nothing(both: Engram) -> None:
    c, (alice, _) = both.conversation, callers(both)

    class Broken:
        model_id = "broken"

        def embed(self, texts: list[str]) -> list[object]:
            raise RuntimeError("model crashed")

    c.embedder = Broken()  # type: ignore[assignment]
    for call in (
        lambda: c.append(alice, "t", "user", "Hello there, anyone?", None),
        lambda: c.search(alice, "hello", None, None, 5),
    ):
        with pytest.raises(EngramError) as info:
            call()
        assert info.value.code == "embedding_error" and info.value.status == 503
    with pytest.raises(NotFound):
        c.history(alice, "t", 50, None, None)  # the failed append left no thread behind
