"""A failed records transaction leaves nothing in the index or the blob store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from engram.adapters.local.sqlite_records import SqliteRecordStore
from engram.errors import Unavailable
from engram.ports import Item, Write
from engram.services.documents import NewDocument
from engram.services.identity import ANY
from engram.services.memory import Turn
from engram.settings import Settings
from engram.wiring import Engram, build_local


class FailingRecords(SqliteRecordStore):
    """Fails every transaction that writes `kind` once armed."""

    armed = False

    def transact(self, writes: Sequence[Write], now: datetime) -> list[Item]:
        if self.armed and any(w.kind in ("turn", "document") for w in writes):
            raise Unavailable("disk on fire")
        return super().transact(writes, now)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Engram, FailingRecords]:
    base = build_local(Settings(data_dir=tmp_path, embedder="none"))
    records = FailingRecords(tmp_path / "failing.db")
    engram = Engram(base.settings, records, base.blobs, base.index, None, base.clock)
    return engram, records


def test_memory_store_failure_leaves_no_index_entry(setup: tuple[Engram, FailingRecords]) -> None:
    engram, records = setup
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    engram.memory.store(caller, Turn("I live in Paris."), None)
    before = engram.index.count("acme")
    records.armed = True
    with pytest.raises(Unavailable):
        engram.memory.store(caller, Turn("Actually, I moved to Rome."), None)
    assert engram.index.count("acme") == before
    records.armed = False
    profile = engram.memory.profile(caller, None)
    assert [s["value"] for s in profile["static"] if s["key"] == "location"] == ["Paris"]
    recall = engram.memory.recall(caller, "where does the user live", k=1, kinds=("attribute",))
    assert recall["results"][0]["text"].endswith("Paris")  # the supersede was undone in the index too


def test_document_ingest_failure_leaves_no_chunks_or_blob(setup: tuple[Engram, FailingRecords]) -> None:
    engram, records = setup
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    records.armed = True
    with pytest.raises(Unavailable):
        engram.documents.ingest(caller, NewDocument(b"Ailerons control roll.", "Ailerons"))
    assert engram.index.count("acme") == 0
    assert not [p for p in Path(engram.settings.data_dir, "blobs").rglob("*") if p.is_file()]
