"""The full_context tier returns the whole visible memory, with or without an embedding model."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from engram.families.memory.service import Turn
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import build_local


def test_full_context_without_embedder_lists_everything_in_order(tmp_path: Path) -> None:
    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    engram.memory.store(caller, Turn("I live in Oslo.", said_at=datetime(2024, 1, 1, tzinfo=UTC)), None)
    engram.memory.store(caller, Turn("We adopted a cat.", said_at=datetime(2024, 2, 1, tzinfo=UTC)), None)
    engram.memory.store(caller, Turn("Actually, I moved to Bergen.", said_at=datetime(2024, 3, 1, tzinfo=UTC)), None)
    out = engram.memory.recall(caller, "zebra crossing", k=20)  # shares no word with anything stored
    assert out["tier"] == "full_context"
    texts = [r["text"] for r in out["results"]]
    assert "We adopted a cat." in texts and "user location: Bergen" in texts
    assert "user location: Oslo" not in texts  # superseded: not current
    said = [r["said_at"] for r in out["results"]]
    assert said == sorted(said)
    then = engram.memory.recall(caller, "zebra", k=20, as_of=datetime(2024, 2, 15, tzinfo=UTC))
    then_texts = [r["text"] for r in then["results"]]
    assert "user location: Oslo" in then_texts and "Actually, I moved to Bergen." not in then_texts


def test_the_context_block_says_a_repeated_text_once_with_its_dates(tmp_path: Path) -> None:
    """The same words stored again (another day, other spacing) are two turns in `results`, one line of the
    block with both dates; other texts keep their own lines, in order."""
    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    for text, day in (
        ("We adopted a cat.", 1),
        ("I  like tea.", 2),
        ("we adopted a cat.", 3),
        ("We adopted a cat.", 3),
    ):
        engram.memory.store(caller, Turn(text, said_at=datetime(2024, 2, day, tzinfo=UTC)), None)
    out = engram.memory.recall(caller, "zebra", k=20)
    assert [r["text"] for r in out["results"]].count("We adopted a cat.") == 2
    lines = out["context"].splitlines()
    assert lines[lines.index("Relevant conversation:") + 1 :] == [
        "- [2024-02-01, 2024-02-03] We adopted a cat.",
        "- [2024-02-02] I  like tea.",
    ]
