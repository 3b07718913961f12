"""Documents with more chunks than one transaction holds (DynamoDB takes 50 writes; a 20-page PDF makes more
chunks than that), on both adapter sets — the embedded store's limit set to DynamoDB's, so that both take the
same path: ingest, update and delete work and every chunk is stored and searchable; concurrent writers and a
lost commit leave no chunk of theirs behind; after a crash, the net removes the chunks no document names.

Before, DynamoDB refused any such document: `too_many_writes` for a 45-chunk upload."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engram.adapters.aws.dynamodb_records import MAX_WRITES
from engram.families.knowledge import EMBED_JOB, STAGED_JOB
from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Conflict
from engram.kernel.ports import Write, scan
from engram.kernel.queue import JOBS
from engram.wiring import Engram
from tests.concurrency import together


def big_text(tag: str, paragraphs: int) -> str:
    """`paragraphs` chunks with the default chunking (~200 tokens each), paragraph i naming `{tag}{i}`."""
    return "\n\n".join(f"{tag}{i} tells of turbines and blades. " + "Wings make lift in flight. " * 28
                       for i in range(paragraphs))  # fmt: skip


@pytest.fixture
def e(both: Engram, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engram]:
    monkeypatch.setattr(both.documents.records, "max_writes", MAX_WRITES)  # SQLite's own is 100,000
    yield both


@pytest.fixture
def caller(e: Engram) -> Caller:
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    return e.identity.enter(p, "acme", ANY, "t")


def chunk_records(e: Engram, doc_id: str) -> list[str]:
    return sorted(i.id for i in scan(e.records, "acme", "chunk", prefix=f"{doc_id}#"))


def nets(e: Engram) -> list[dict[str, Any]]:
    return [i.data for i in scan(e.records, JOBS, "job") if i.data["name"] == STAGED_JOB]


def all_chunks(e: Engram, caller: Caller, doc_id: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        page = e.documents.chunks(caller, doc_id, cursor, 50)
        out += page["chunks"]
        cursor = page["cursor"]
        if not cursor:
            return out


def test_a_document_of_many_chunks_is_stored_searchable_changed_and_deleted(e: Engram, caller: Caller) -> None:
    doc = e.documents.ingest(caller, NewDocument(big_text("alpha", 75).encode(), "Big"))
    assert doc["chunks_created"] == 75
    found = e.documents.search(caller, Search("alpha74 turbines", "bm25", 5))["results"]
    assert found and found[0]["document_id"] == doc["id"]  # searchable at once, to the last chunk
    e.queue.join()
    got = e.documents.get(caller, doc["id"])
    assert got["status"] == "indexed" and got["chunks"] == 75
    chunks = all_chunks(e, caller, doc["id"])
    assert [c["text"].split()[0] for c in chunks] == [f"alpha{i}" for i in range(75)]
    assert chunk_records(e, doc["id"]) == sorted(c["id"] for c in chunks)
    assert nets(e) == []  # withdrawn once the commit was in

    out = e.documents.update(caller, doc["id"], {"text": big_text("beta", 60)}, expected_version=doc["version"])
    assert out["version"] == 2 and out["chunks"] == 60
    [job] = [i.data for i in scan(e.records, JOBS, "job") if i.data["name"] == EMBED_JOB]
    retire = job["payload"]["retire"]  # its chunks named by prefix and count: any number fits in a message
    assert (retire["prefix"], retire["count"], "chunks" in retire) == (f"{doc['id']}#", 75, False)
    e.queue.join()
    chunks = all_chunks(e, caller, doc["id"])
    assert [c["text"].split()[0] for c in chunks] == [f"beta{i}" for i in range(60)]
    assert chunk_records(e, doc["id"]) == sorted(c["id"] for c in chunks)  # the 75 of version 1 retired
    assert e.documents.search(caller, Search("alpha7", "bm25", 5, document_id=doc["id"]))["results"] == []
    assert e.documents.search(caller, Search("beta59", "bm25", 5, document_id=doc["id"]))["results"]

    e.documents.delete(caller, doc["id"])
    e.queue.join()
    assert chunk_records(e, doc["id"]) == [] and nets(e) == []


def test_concurrent_writers_of_many_chunks_leave_one_writers_chunks(e: Engram, caller: Caller) -> None:
    doc = e.documents.ingest(caller, NewDocument(b"The original text about turbines.", "Doc"))
    e.queue.join()
    writers = 4
    outcomes: dict[int, object] = {}

    def write(w: int) -> None:
        try:
            outcomes[w] = e.documents.update(caller, doc["id"], {"text": big_text(f"w{w}x", 55 + w)}, 1)
        except Conflict as exc:
            outcomes[w] = exc

    assert together(writers, write) == []  # a 500 fails here, with what it was
    winners = [w for w, o in outcomes.items() if isinstance(o, dict)]
    assert len(winners) == 1 and all(isinstance(o, dict | Conflict) for o in outcomes.values()), outcomes
    [w] = winners
    e.queue.join()
    chunks = all_chunks(e, caller, doc["id"])
    assert [c["text"].split()[0] for c in chunks] == [f"w{w}x{i}" for i in range(55 + w)]
    assert chunk_records(e, doc["id"]) == sorted(c["id"] for c in chunks)  # no loser's chunk, none of v1
    assert nets(e) == []


def test_concurrent_ingests_of_many_chunks_all_land(e: Engram, caller: Caller) -> None:
    writers = 4
    outcomes: dict[int, Any] = {}

    def ingest(w: int) -> None:
        outcomes[w] = e.documents.ingest(caller, NewDocument(big_text(f"d{w}y", 60).encode(), f"D{w}"))

    assert together(writers, ingest) == []
    assert all(isinstance(o, dict) and o["chunks_created"] == 60 for o in outcomes.values()), outcomes
    for w, out in outcomes.items():
        assert len(chunk_records(e, out["id"])) == 60
        assert e.documents.search(caller, Search(f"d{w}y59", "bm25", 3))["results"][0]["document_id"] == out["id"]
    assert nets(e) == []


def test_a_lost_commit_leaves_no_staged_chunk(e: Engram, caller: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    store = e.documents.records
    transact = store.transact

    def losing(writes: list[Write], now: Any) -> Any:
        if any(w.kind == "document" for w in writes):
            raise Conflict("a concurrent write changed an item", code="version_conflict")
        return transact(writes, now)

    monkeypatch.setattr(store, "transact", losing)
    with pytest.raises(Conflict):
        e.documents.ingest(caller, NewDocument(big_text("lost", 70).encode(), "Lost"))
    assert [i.id for i in scan(e.records, "acme", "chunk")] == [] and nets(e) == []


def test_after_a_crash_the_net_removes_the_chunks_no_document_names(e: Engram, caller: Caller) -> None:
    """A writer that dies between staging its chunks and its commit leaves them under a net; when the net is
    due it removes them, and it keeps a committed document's."""
    now = e.clock.now()
    writes = [Write("acme", "chunk", f"doc:crashed#{p:05d}", {"document_id": "doc:crashed", "text": "x"}, "t")
              for p in range(70)]  # fmt: skip
    net = e.documents._stage("acme", "doc:crashed", "doc:crashed#", writes, now)  # then the process died
    assert len(chunk_records(e, "doc:crashed")) == 70 and len(nets(e)) == 1
    assert nets(e)[0]["due"] > now.isoformat()  # not before any writer could still be writing
    kept = e.documents.ingest(caller, NewDocument(big_text("kept", 60).encode(), "Kept"))
    e.queue.dispatch(STAGED_JOB, [net.data["payload"]])  # due: what the worker runs
    e.queue.dispatch(STAGED_JOB, [{**net.data["payload"], "document_id": kept["id"],
                                   "prefix": f"{kept['id']}#", "count": 60}])  # fmt: skip
    assert chunk_records(e, "doc:crashed") == []
    assert len(chunk_records(e, kept["id"])) == 60
