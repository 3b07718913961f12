"""Versioned document writes under contention, on both adapter sets (SQLite + files; DynamoDB + S3 +
OpenSearch): many writers update one document with the same expected version. Exactly one wins; its
text, chunks, file and version are what every reader sees; the losers get 409 and leave no trace."""

from __future__ import annotations

import threading
from pathlib import Path

import boto3
import pytest

from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Conflict
from engram.kernel.ports import scan
from engram.wiring import Engram

WRITERS = 12
ROUNDS = 4


def blob_keys(e: Engram, ctx: str, doc_id: str, tmp_path: Path) -> int:
    """How many blobs the document has in the store."""
    if e.settings.backend == "aws":
        s3 = boto3.client("s3", region_name="us-east-1")
        got = s3.list_objects_v2(Bucket=e.settings.bucket, Prefix=f"{ctx}/{doc_id}/")
        return int(got.get("KeyCount", 0))
    return sum(1 for p in (tmp_path / "blobs").rglob("*") if p.is_file())


def text_of(writer: int) -> str:
    """Mixed lengths: writer w writes w + 1 paragraphs of ~60 tokens each, every one naming it (1 to 4 chunks)."""
    sentence = f"Writer{writer} tells of turbines and blades in paragraph %d. "
    return "\n\n".join((sentence % p) * 5 for p in range(writer + 1))


def test_concurrent_updates_leave_one_writers_document(both: Engram, tmp_path: Path) -> None:
    e = both
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    for _ in range(ROUNDS):
        doc = e.documents.ingest(caller, NewDocument(b"The original text about turbines.", "Doc"))
        e.queue.join()
        doc_id = doc["id"]
        start = threading.Barrier(WRITERS)
        outcomes: dict[int, object] = {}

        def write(
            w: int, doc_id: str = doc_id, start: threading.Barrier = start, outcomes: dict[int, object] = outcomes
        ) -> None:
            start.wait()
            try:
                outcomes[w] = e.documents.update(caller, doc_id, {"text": text_of(w)}, expected_version=1)
            except Conflict as exc:
                outcomes[w] = exc
            except Exception as exc:  # a 500: the test fails below with what it was
                outcomes[w] = RuntimeError(repr(exc))

        threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [w for w, o in outcomes.items() if isinstance(o, dict)]
        errors = [o for o in outcomes.values() if not isinstance(o, dict | Conflict)]
        assert errors == [] and len(winners) == 1, outcomes
        assert all(o.code == "version_conflict" for o in outcomes.values() if isinstance(o, Conflict))
        [w] = winners
        e.queue.join()
        check_one_writer(e, caller, doc_id, w, tmp_path)


def check_one_writer(e: Engram, caller: Caller, doc_id: str, w: int, tmp_path: Path) -> None:
    got = e.documents.get(caller, doc_id, include_text=True)
    assert got["version"] == 2 and got["status"] == "indexed"
    assert got["text"].split() == text_of(w).split() and got["chunks"] >= 1
    chunks = e.documents.chunks(caller, doc_id, None, 100)["chunks"]
    assert len(chunks) == got["chunks"] and all(f"writer{w} " in c["text"].lower() for c in chunks)
    # the stored file is the winner's, and it is the document's only blob
    item = e.records.get("acme", "document", doc_id)
    assert item is not None and e.blobs.get(item.data["blob_key"]).decode() == text_of(w)
    if e.settings.backend == "aws":
        assert blob_keys(e, "acme", doc_id, tmp_path) == 1
    # no chunk record of v1 or of a loser remains
    prefix_records = [i.id for i in scan(e.records, "acme", "chunk", prefix=f"{doc_id}#")]
    assert sorted(prefix_records) == sorted(c["id"] for c in chunks)
    # search sees the winner's every chunk and nothing of the losers' or of v1
    found = e.documents.search(caller, Search("turbines blades", "bm25", 50, document_id=doc_id))["results"]
    assert sorted(r["chunk_id"] for r in found) == sorted(c["id"] for c in chunks)
    for loser in (x for x in range(WRITERS) if x != w):
        hits = e.documents.search(caller, Search(f"writer{loser}", "bm25", 5, document_id=doc_id))["results"]
        assert hits == [], loser
    assert e.documents.search(caller, Search("original", "bm25", 5, document_id=doc_id))["results"] == []


def test_the_version_an_ingest_answers_is_the_one_to_update_after_indexing(both: Engram) -> None:
    """Processing (embedding, status) is not a user version: no other writer, no 409."""
    e = both
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    doc = e.documents.ingest(caller, NewDocument(b"Blades and turbines.", "Doc"))
    e.queue.join()
    assert e.documents.get(caller, doc["id"])["status"] == "indexed"
    out = e.documents.update(caller, doc["id"], {"title": "Renamed"}, expected_version=doc["version"])
    assert out["version"] == doc["version"] + 1 and out["title"] == "Renamed"
    e.queue.join()
    out = e.documents.update(caller, doc["id"], {"text": "New text."}, expected_version=out["version"])
    assert out["version"] == doc["version"] + 2


def test_concurrent_turns_in_one_session_are_all_stored_in_a_definite_order(both: Engram) -> None:
    """50 memory_store calls at once in one session (the default one: a key's per day): none conflicts."""
    from engram.families.memory.base import Turn
    from engram.families.memory.plan import session_key

    e = both
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    n = 50
    start = threading.Barrier(n)
    outcomes: dict[int, object] = {}

    def store(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = e.memory.store(caller, Turn(f"Note number {i} about the harbour."), None)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=store, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    failures = {i: o for i, o in outcomes.items() if not isinstance(o, dict)}
    assert failures == {} and len(outcomes) == n
    [session_id] = {o["session_id"] for o in outcomes.values()}  # type: ignore[index]
    session = e.records.get("acme", "session", session_key(session_id, list(p.grant)))
    assert session is not None and session.data["turns"] == n
    turns = [i.data for i in scan(e.records, "acme", "turn")]
    assert sorted(t["seq"] for t in turns) == list(range(1, n + 1))  # each its own place, none shared


@pytest.mark.parametrize("container", ["folder", "collection"])
def test_a_delete_racing_ingests_never_leaves_a_document_pointing_nowhere(both: Engram, container: str) -> None:
    """Writers file documents into a folder (or collection) while another deletes it: the delete either
    wins before them (their ingests then fail cleanly) or is refused; never a dangling reference."""
    from engram.kernel.errors import EngramError
    from engram.kernel.ports import scan

    e = both
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    outcomes = {"deleted": 0, "refused": 0, "filed": 0, "ingest_failed": 0}
    errors: list[str] = []
    for round_ in range(6):
        name = f"box{round_}"
        folder_id = e.documents.folder_create(caller, name, None, None, None)["id"] if container == "folder" else None
        if container == "collection":
            e.documents.collections(caller, "create", name, None)
        start = threading.Barrier(9)

        def ingest(
            i: int, name: str = name, folder_id: str | None = folder_id, start: threading.Barrier = start
        ) -> None:
            start.wait()
            new = NewDocument(f"round {name} document {i}".encode(), f"d{i}")
            new.folder_id, new.collection = folder_id, (name if container == "collection" else None)
            try:
                e.documents.ingest(caller, new)
                outcomes["filed"] += 1
            except EngramError as exc:
                outcomes["ingest_failed"] += 1
                errors.append(f"{type(exc).__name__}: {exc.message}")

        def delete(name: str = name, folder_id: str | None = folder_id, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                if folder_id is not None:
                    e.documents.folder_delete(caller, folder_id)
                else:
                    e.documents.collections(caller, "delete", name, None)
                outcomes["deleted"] += 1
            except EngramError:
                outcomes["refused"] += 1

        threads = [threading.Thread(target=ingest, args=(i,)) for i in range(8)] + [threading.Thread(target=delete)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        exists = (
            e.records.get("acme", "folder", folder_id) is not None
            if folder_id is not None
            else e.records.get("acme", "collection", name) is not None
        )
        key, value = ("folder_id", folder_id) if folder_id is not None else ("collection", name)
        members = [
            i for i in scan(e.records, "acme", "document") if i.data["status"] != "deleted" and i.data.get(key) == value
        ]
        assert exists or members == [], (round_, len(members))  # the invariant: nothing points nowhere
    # every call ended one clean way or the other (which wins the race depends on the adapters' speed)
    assert outcomes["filed"] + outcomes["ingest_failed"] == 48 and outcomes["deleted"] + outcomes["refused"] == 6
    assert all(x.startswith(("NotFound", "Conflict")) for x in errors), errors[:3]
    print(container, outcomes)
