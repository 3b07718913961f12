"""`engram admin reindex`, on both adapter sets, with the real model: a context's search index lost and made again
from the record store holds what it held — every family's documents, the same scores, the same vectors (a turn's
made with the turn before it, as its write made it) — and settles what writes changed while it ran."""

from __future__ import annotations

import shutil
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram.families.knowledge.base import NewDocument
from engram.families.memory.base import Turn
from engram.kernel.caller import Caller
from engram.kernel.family import Family
from engram.kernel.kinds import Kinds
from engram.kernel.ports import SearchMode, SearchQuery
from engram.search.reindex import rebuild
from engram.settings import Settings
from engram.wiring import Engram, build, build_local
from tests.contract.conftest import BOB, aws_engram_on, two_agents

QUERIES = ("order parcel arrived", "Lisbon sister Carol", "lives in Paris, works at Acme", "ratio secret",
           "okapi leaves", "use the ratio")  # fmt: skip
MODES: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")


@pytest.fixture(params=["local", pytest.param("aws", marks=[pytest.mark.aws, pytest.mark.opensearch])])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """An Engram with the real model, and a way to open its stores again over an empty search index."""
    if request.param == "local":
        settings = Settings(data_dir=tmp_path, queue_worker=False)

        def again_local() -> Engram:
            for f in tmp_path.glob("search.db*"):  # the index lost, its segments with it
                shutil.rmtree(f) if f.is_dir() else f.unlink()
            return build_local(settings)

        yield build_local(settings), again_local
        return
    mp = pytest.MonkeyPatch()
    first = aws_engram_on(request.getfixturevalue("aws"), request.getfixturevalue("opensearch"), mp, tmp_path)

    def again_aws() -> Engram:  # a new, empty index (its domain replaced, say), made by `admin bootstrap`
        fresh = build(first.settings.model_copy(update={"opensearch_index": f"engram-{uuid.uuid4().hex[:8]}"}))
        fresh.index.ensure()
        return fresh

    yield first, again_aws
    mp.undo()


def fill(e: Engram) -> tuple[Caller, Caller]:
    """Objects of every family that indexes: memories (a session of turns, attributes), a document, messages,
    a typed record, a file and a decision — and entities, which the memories and the document feed."""
    from engram.families.workspace.files import NewFile
    from tests.contract.test_records import LOOKUPS, ORDER

    alice, bob = two_agents(e)
    for text in ("My sister is Carol.", "She moved to Lisbon last year.", "Yes, she likes it there."):
        e.memory.store(alice, Turn(text, session_id="s1"), None)
    e.memory.store(alice, Turn("I live in Paris and I work at Acme Corp.", session_id="s1"), None)
    e.memory.store(bob, Turn("The okapi ate twelve leaves.", session_id="s2"), None)
    e.documents.ingest(alice, NewDocument(b"Jane Smith works at Initech. The parcel arrived late.", "Notes"))
    for text in ("My parcel never arrived.", "It was order ABC-7."):
        e.conversation.append(alice, "ticket-1", "user", text, None)
    e.schemas.create("acme", "cli", "order", "record", ORDER, LOOKUPS, "keyword", None, "")
    e.typed.create(alice, "order", {"sku": "ABC-7", "qty": 2}, "ext-alice", None, None, None)
    e.workspace.write(alice, NewFile("lib/util.py", "SECRET_RATIO = 7\n", "test"))
    e.collab.record_decision(alice, {"decision": "Use the secret ratio", "reasoning": "It is ours.", "context": {},
                                     "confidence": 0.9, "alternatives": [], "impact": "low"})  # fmt: skip
    e.queue.join()
    return alice, bob


def snapshot(e: Engram) -> dict[tuple[str, str], list[tuple[str, float]]]:
    everyone = [["org/acme"]]
    now = datetime.now(UTC)
    out = {}
    for q in QUERIES:
        vector = e.embedder.embed([q])[0] if e.embedder is not None else None
        for mode in MODES:
            hits = e.index.search(SearchQuery("acme", q, vector, mode, 50, None, everyone), now)
            out[q, mode] = [(h.id, round(h.score, 5)) for h in hits]
    return out


def same(e: Engram, a: dict[Any, list[tuple[str, float]]], b: dict[Any, list[tuple[str, float]]]) -> bool:
    """The same hits: on SQLite the same list, to the score; on OpenSearch the same hits for every query and mode
    (its BM25 statistics count the documents an update replaced until a segment merge, so scores move)."""
    if e.settings.backend == "local":
        return a == b
    return a.keys() == b.keys() and all({i for i, _ in a[k]} == {i for i, _ in b[k]} for k in a)


def test_every_family_that_indexes_declares_a_reindexer() -> None:
    from engram.families import all_families

    families: list[Family] = list(all_families())
    indexing = {k.family for k in Kinds(*(f.kinds for f in families)).values() if k.indexed}
    assert indexing <= {f.name for f in families if f.reindexer is not None}, indexing


def test_a_lost_index_is_made_again_as_it_was(pair: Any) -> None:
    e, again = pair
    fill(e)
    before = snapshot(e)
    ids = sorted({h for hits in before.values() for h, _ in hits})
    kinds = {i.partition(":")[0].partition("#")[0] for i in ids}
    assert len(ids) >= 10 and {"turn", "attr"} <= kinds, ids
    vectors = e.index.vectors("acme", ids)
    fresh = again()
    assert all(hits == [] for hits in snapshot(fresh).values())  # lost
    done = rebuild(fresh, "acme")
    assert set(done["indexed"]) == {"memory", "knowledge", "conversation", "entities", "records", "workspace"}
    assert all(n > 0 for n in done["indexed"].values()), done
    assert done["unsettled"] == 0 and done["passes"] == 1
    assert same(fresh, snapshot(fresh), before)
    rebuilt = fresh.index.vectors("acme", ids)
    assert rebuilt.keys() == vectors.keys()
    for i in vectors:  # the same vectors: a turn's made with the turn before it, as its write made it
        assert float(np.dot(np.asarray(rebuilt[i]), np.asarray(vectors[i]))) > 0.9999, i
    # over a whole index, again: nothing changes
    assert rebuild(fresh, "acme")["unsettled"] == 0 and same(fresh, snapshot(fresh), before)


def test_a_rebuild_settles_what_writes_and_erasures_changed_while_it_ran(pair: Any) -> None:
    """Writers store and forget, and an erasure takes Bob's memories, while the rebuild runs; afterwards the index
    holds exactly what a rebuild over the quiet store gives: nothing erased, nothing stale."""
    from engram.kernel.caller import ANY

    e, again = pair
    alice, _ = fill(e)
    fresh = again()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            k = 0
            while not stop.is_set() and k < 6:
                fresh.memory.store(alice, Turn(f"Note {n}.{k}: I moved to city number {n}{k}.", session_id=f"w{n}"),
                                   None)  # fmt: skip
                k += 1
        except BaseException as exc:
            errors.append(exc)

    _, m = fresh.identity.create_key(["acme"], "management", ["org/acme"])
    manager = fresh.identity.enter(m, "acme", ANY, "t")
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    asked = fresh.erasure.request(manager, fresh.erasure.subject(manager, BOB, None), preview=False)
    eraser = threading.Thread(target=lambda: fresh.erasure.run("acme", asked["request_id"], wait=True))
    threads.append(eraser)
    eraser.start()
    done = rebuild(fresh, "acme")
    stop.set()
    for t in threads:
        t.join()
    fresh.queue.join()
    assert fresh.erasure.status(manager, asked["request_id"])["status"] == "done"
    assert errors == [] and done["passes"] >= 1
    settled = snapshot(fresh)
    assert all("okapi" not in h for hits in settled.values() for h, _ in hits)
    # what a rebuild over the quiet store makes (the third store, with its index lost once more)
    quiet = again()
    assert rebuild(quiet, "acme")["unsettled"] == 0
    assert same(quiet, snapshot(quiet), settled)
    everyone = [["org/acme"]]
    okapi = quiet.index.search(SearchQuery("acme", "okapi leaves", None, "bm25", 10, None, everyone), datetime.now(UTC))
    assert okapi == []


def test_a_write_and_an_erasure_between_a_jobs_read_and_its_upsert_are_settled(pair: Any) -> None:
    """The races a later pass is there for, made to happen: once memory's jobs have run, Alice's location changes
    and Bob's memories are erased, and then each job's late upsert lands (the attribute as the job read it, Bob's
    turn back in the index). The next pass finds the attribute at a newer version and Bob's turn gone: the index
    ends as the store says, with nothing of Bob's."""
    from engram.families.memory.plan import index_doc_of
    from engram.kernel.caller import ANY

    e, again = pair
    alice, _ = fill(e)
    fresh = again()
    _, m = fresh.identity.create_key(["acme"], "management", ["org/acme"])
    manager = fresh.identity.enter(m, "acme", ANY, "t")
    location = next(i for i in fresh.records.query("acme", "attribute").items if i.data["key"] == "location")
    okapi = next(i for i in fresh.records.query("acme", "turn").items if "okapi" in i.data["content"])
    raced: list[str] = []

    def meanwhile(family: str, _: int) -> None:
        if family == "memory" or raced:
            return
        late = [index_doc_of(i) for i in (fresh.records.get("acme", "attribute", location.id), okapi)]
        vectors = fresh.index.vectors("acme", [d.id for d in late])
        fresh.memory.store(alice, Turn("Actually, I moved to Berlin.", session_id="s1"), None)
        asked = fresh.erasure.request(manager, fresh.erasure.subject(manager, BOB, None), preview=False)
        fresh.erasure.run("acme", asked["request_id"])
        fresh.index.upsert([d.with_vector(vectors.get(d.id)) for d in late if d is not None])  # the late upserts
        raced.append(family)

    done = rebuild(fresh, "acme", meanwhile)
    assert raced and done["passes"] == 2 and done["unsettled"] == 0
    everyone = [["org/acme"]]
    now = datetime.now(UTC)
    assert fresh.index.search(SearchQuery("acme", "okapi leaves", None, "bm25", 10, None, everyone), now) == []
    paris = fresh.index.search(SearchQuery("acme", "location Paris", None, "bm25", 10, ("attribute",), everyone), now)
    assert location.id not in [h.id for h in paris]  # superseded (valid until the move), as the store says
    quiet = again()
    rebuild(quiet, "acme")
    assert same(quiet, snapshot(quiet), snapshot(fresh))


def test_the_cli_rebuilds_a_local_context(tmp_path: Path, capsys: Any) -> None:
    from engram.cli.main import main

    e = build_local(Settings(data_dir=tmp_path, queue_worker=False))
    fill(e)
    before = snapshot(e)
    memories = sum(len(e.records.query("acme", kind, limit=1000).items) for kind in ("turn", "attribute"))
    for f in tmp_path.glob("search.db*"):
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    assert main(["admin", "reindex", "--data-dir", str(tmp_path), "--context", "acme"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"acme: memory {memories}, knowledge 1, ")
    assert snapshot(build_local(Settings(data_dir=tmp_path, queue_worker=False))) == before
    for f in tmp_path.glob("search.db*"):  # lost again: every context a key names
        shutil.rmtree(f) if f.is_dir() else f.unlink()
    assert main(["admin", "reindex", "--data-dir", str(tmp_path), "--all"]) == 0
    assert [line.partition(":")[0] for line in capsys.readouterr().out.splitlines() if line] == ["acme"]
    assert snapshot(build_local(Settings(data_dir=tmp_path, queue_worker=False))) == before
