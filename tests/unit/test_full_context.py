"""The full_context tier returns the whole visible memory, with or without an embedding model."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from engram.families.memory.service import Turn
from engram.identity import ANY
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
