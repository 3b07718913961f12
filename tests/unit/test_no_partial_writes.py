"""A failed records transaction leaves nothing in the index or the blob store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from engram.adapters.local.sqlite_records import SqliteRecordStore
from engram.families.knowledge.documents import NewDocument
from engram.families.memory.service import Turn
from engram.kernel.caller import ANY
from engram.kernel.errors import Unavailable
from engram.kernel.ports import Item, SearchQuery, Write
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


def test_memories_committed_but_not_indexed_are_indexed_by_the_safety_net(tmp_path: Path) -> None:
    """The records commit first; if indexing then fails (or the process dies), the job committed with
    them indexes them from the store when it falls due. On the normal path the job is withdrawn."""
    from datetime import UTC, datetime, timedelta

    from engram.adapters.local.sqlite_search import SqliteSearchIndex
    from engram.kernel.clock import FixedClock
    from engram.kernel.queue import StoreQueue

    class FlakyIndex(SqliteSearchIndex):
        fail = False

        def upsert(self, docs: Sequence[Any], closing: Sequence[Any] = ()) -> None:
            if self.fail:
                raise OSError("index unreachable")
            super().upsert(docs, closing)

    clock = FixedClock(datetime(2026, 3, 1, tzinfo=UTC))
    base = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False), clock=clock)
    index = FlakyIndex(tmp_path / "flaky.db")
    engram = Engram(base.settings, base.records, base.blobs, index, None, clock)
    queue = engram.queue
    assert isinstance(queue, StoreQueue)
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = engram.identity.enter(p, "acme", ANY, "t")
    engram.memory.store(caller, Turn("I live in Paris."), None)
    assert queue.pending() == []  # indexed here: the safety net was withdrawn
    index.fail = True
    out = engram.memory.store(caller, Turn("I play the cello on Sundays."), None)  # committed; indexing failed
    index.fail = False
    assert engram.records.get("acme", "turn", out["turn_id"]) is not None

    def indexed(word: str) -> list[str]:
        return [h.id for h in index.search(SearchQuery("acme", word, mode="bm25", k=5), clock.now())]

    assert indexed("cello") == []
    [job] = queue.pending()
    assert queue.run_once() is False  # not due yet: the writer had its chance first
    clock.current += timedelta(seconds=31)
    assert queue.join(10)
    assert out["turn_id"] in indexed("cello")
    assert queue.pending() == [] and job.id not in [j.id for j in queue.failed()]
