"""The embedded index's in-memory BM25 stays exact under any sequence of writes: after random upserts,
re-upserts (same text, vector added), replacements and deletes, its scores equal BM25 computed from
scratch over the live documents (slots are reused, postings are edited in place), and so do the term
counts its results' scores are weighed with."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter
from datetime import UTC, datetime

import numpy as np
import pytest

from engram.adapters.local.sqlite_search import SqliteSearchIndex
from engram.adapters.local.take import counts
from engram.kernel.ports import IndexDoc, SearchQuery
from engram.search.rules import query_weights
from engram.search.terms import BM25_B, BM25_K1, index_terms, stem, term_set

WORDS = [
    "wing",
    "flutter",
    "shock",
    "wave",
    "boundary",
    "layer",
    "heat",
    "transfer",
    "supersonic",
    "nozzle",
    "cone",
    "drag",
    "lift",
    "panel",
]


def reference(docs: dict[str, str], terms: list[str]) -> dict[str, float]:
    toks = {i: index_terms(t) for i, t in docs.items()}
    n = len(toks)
    avg = sum(len(t) for t in toks.values()) / n
    df = Counter(t for ts in toks.values() for t in set(ts))
    out: dict[str, float] = {}
    for i, ts in toks.items():
        tf = Counter(ts)
        score, hit = 0.0, False
        for t in terms:
            if tf[t]:
                hit = True
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf[t] * (BM25_K1 + 1) / (tf[t] + BM25_K1 * (1 - BM25_B + BM25_B * len(ts) / avg))
        if hit:
            out[i] = score
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bm25_matches_a_from_scratch_computation_after_random_writes(tmp_path, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    index = SqliteSearchIndex(tmp_path / "s.db")
    now = datetime.now(UTC)
    index.search(SearchQuery("c", "wing", mode="bm25", k=1), now)  # load the context: writes go to memory too
    live: dict[str, str] = {}
    vectors: set[str] = set()
    for step in range(300):
        op = rng.random()
        doc_id = f"d{rng.randrange(40)}"
        if op < 0.15 and live:
            gone = rng.choice(sorted(live))
            index.delete("c", [gone])
            live.pop(gone)
            vectors.discard(gone)
            continue
        if op < 0.35 and doc_id in live:  # the same text again, now with a vector
            text = live[doc_id]
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 12)))
        vec = np.ones(4, dtype=np.float32) / 2 if op < 0.35 or rng.random() < 0.3 else None
        index.upsert([IndexDoc("c", "chunk", doc_id, text, vec, ["org"], None, None, {})])
        live[doc_id] = text
        (vectors.add if vec is not None else vectors.discard)(doc_id)
        if step % 25 == 24:
            for _ in range(3):
                words = rng.sample(WORDS, 2)
                want = reference(live, [stem(w) for w in words])
                stems = [stem(w) for w in words]
                q = SearchQuery("c", " ".join(words), mode="bm25", k=100)
                got = index._bm25(q, now, query_weights(q.text), 100)  # the raw scores the ranking uses
                assert {h.id: h.score for h in got} == pytest.approx(want, rel=1e-4)
                assert [h.id for h in index.search(q, now)] == [h.id for h in got]
                docs, df = index.term_counts("c", stems)
                containing = {t: sum(t in index_terms(x) for x in live.values()) for t in stems}
                assert (docs, dict(df)) == (len(live), containing)
                # which stems each document holds, from the postings, as tokenising its text says (scores use it)
                held = index.terms_in("c", [*live, "nope"], stems)
                assert held == {i: set(stems) & term_set(x) for i, x in live.items()}
                assert all(term_set(x) == set(index_terms(x)) for x in live.values())
            found = index.search(SearchQuery("c", vector=np.ones(4, dtype=np.float32) / 2, mode="vector", k=100), now)
            assert {h.id for h in found} == vectors
    assert index.count("c") == len(live)


def test_kind_and_metadata_filters_see_every_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The embedded index keeps a slot mask per kind / metadata filter until the next write: a filtered
    search after a write (new, replaced, deleted) answers as a search that filters afterwards would."""
    index = SqliteSearchIndex(tmp_path / "s.db")
    now = datetime.now(UTC)

    def put(i: str, thread: str, kind: str = "message") -> None:
        index.upsert([IndexDoc("c", kind, i, f"valve {i} is leaking", None, ["org"], None, None, {"thread": thread})])

    def found(thread: str) -> set[str]:
        q = SearchQuery("c", "valve leaking", mode="bm25", k=100, kinds=["message"], metadata={"thread": thread})
        return {h.id for h in index.search(q, now)}

    for n in range(30):
        put(f"m{n}", f"t{n % 3}")
    put("chunk", "t0", kind="chunk")
    assert found("t0") == {f"m{n}" for n in range(0, 30, 3)}
    put("m99", "t0")  # new
    put("m3", "t1")  # moved to another thread
    index.delete("c", ["m6"])
    assert found("t0") == {f"m{n}" for n in range(0, 30, 3)} - {"m3", "m6"} | {"m99"}
    assert "m3" in found("t1") and "chunk" not in found("t0")


def test_faceted_filters_see_every_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`speaker` and `session_id` masks come from the values kept per slot (`rows.faceted`): a write that changes only
    the metadata (the same text: the slot is kept), a move, a delete — each seen by the next filtered search, in
    memory and over a saved segment (its rows through SQLite's expression indexes)."""
    now = datetime.now(UTC)

    def put(index: SqliteSearchIndex, i: str, speaker: str, text: str = "") -> None:
        meta = {"speaker": speaker, "session_id": f"s-{speaker}"}
        index.upsert([IndexDoc("c", "turn", i, text or f"the valve {i} leaks", None, ["org"], None, None, meta)])

    def found(index: SqliteSearchIndex, *speakers: str) -> set[str]:
        q = SearchQuery("c", "valve leaks", mode="bm25", k=100, metadata={"speaker": list(speakers)})
        by_session = SearchQuery("c", "valve leaks", mode="bm25", k=100, metadata={"session_id": [f"s-{speakers[0]}"]})
        assert {h.id for h in index.search(by_session, now)} == {h.id for h in index.search(dataclasses.replace(
            q, metadata={"speaker": speakers[0]}), now)}  # fmt: skip
        return {h.id for h in index.search(q, now)}

    index = SqliteSearchIndex(tmp_path / "s.db")
    for n in range(12):
        put(index, f"m{n}", ["Ann", "Bo", "Cy"][n % 3])
    assert found(index, "Ann") == {"m0", "m3", "m6", "m9"}
    assert found(index, "Bo", "Cy") == {f"m{n}" for n in range(12)} - found(index, "Ann")
    put(index, "m0", "Bo", "the valve m0 leaks")  # the same text, another speaker: the slot stays, its values move
    put(index, "m1", "Ann", "the valve m1 still leaks")  # new text: a new slot
    index.delete("c", ["m3"])
    assert found(index, "Ann") == {"m1", "m6", "m9"} and "m0" in found(index, "Bo")
    assert found(index, "Nobody") == set()


def test_equal_scores_rank_by_id_whatever_the_order_of_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The port's rule: ties break by id. A context's slots follow the order of its writes (a rebuilt index writes in
    id order): the same documents, written in any order, rank alike."""
    now = datetime.now(UTC)
    ids = [f"d{n:02d}" for n in range(40)]
    answers = []
    for order in (ids, ids[::-1], random.Random(3).sample(ids, len(ids))):
        index = SqliteSearchIndex(tmp_path / f"{len(answers)}.db")
        index.upsert([IndexDoc("c", "turn", i, "the same valve", None, ["org"]) for i in order])
        answers.append([h.id for h in index.search(SearchQuery("c", "valve", mode="bm25", k=10), now)])
    assert answers[0] == ids[:10] and answers[1] == answers[0] and answers[2] == answers[0]


TAGS = [("org",), ("org/a",), ("org/b",), ("org/a", "org/b"), ("org/a/x",), ()]
SELECTORS = [None, [["org"]], [["org/a"]], [["org/b"]], [["org/a", "org/b"]], [["org/a"], ["org/b"]], []]


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_filtered_ranking_equals_the_visible_rule_row_by_row(tmp_path, seed: int) -> None:  # type: ignore[no-untyped-def]
    """The embedded index filters by masks (scope tag sets, validity in microseconds, kind and metadata):
    after random writes, deletes and validity changes, every query returns exactly what ranking all live
    documents and keeping those `filters.visible` keeps would — the same rows, in the same order (ties by
    id). Also when the visibility mask is kept between writes (`Slots.allowed`) and asked for at other
    instants, right at and either side of where validity starts and ends."""
    from datetime import timedelta

    from engram.search.filters import visible

    rng = random.Random(seed)
    index = SqliteSearchIndex(tmp_path / "s.db")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    index.search(SearchQuery("c", "wing", mode="bm25", k=1), t0)  # loaded: writes go to memory too
    live: dict[str, IndexDoc] = {}
    for step in range(400):
        op, doc_id = rng.random(), f"d{rng.randrange(60)}"
        if op < 0.1 and live:
            gone = rng.choice(sorted(live))
            index.delete("c", [gone])
            live.pop(gone)
        elif op < 0.2 and live:
            moved = rng.choice(sorted(live))
            until = rng.choice([None, t0 + timedelta(days=rng.randrange(-5, 5), microseconds=rng.randrange(3))])
            index.set_validity("c", moved, until)
            live[moved] = IndexDoc(**{**vars(live[moved]), "valid_until": until})
        else:
            vec = np.asarray([rng.choice([0.0, 0.5, 1.0]) for _ in range(4)], dtype=np.float32)  # many ties
            start = rng.choice([None, t0 + timedelta(days=rng.randrange(-5, 5))])
            doc = IndexDoc(
                "c", rng.choice(["turn", "chunk"]), doc_id, " ".join(rng.choice(WORDS) for _ in range(4)),
                vec if rng.random() < 0.8 else None, list(rng.choice(TAGS)), start, None,
                {"thread": "z" if rng.random() < 0.03 else rng.choice(["x", "y"])},  # z: few, multiplied alone
            )  # fmt: skip
            index.upsert([doc])
            live[doc_id] = doc
        if step % 20 != 19:
            continue
        qv = np.asarray([rng.random() for _ in range(4)], dtype=np.float32)
        for _ in range(10):  # one selector's mask is kept between writes: instants either side of the bounds
            q = SearchQuery(
                "c", vector=qv, mode="vector", k=rng.choice([1, 3, 10, 100]),
                kinds=rng.choice([None, ["turn"], ["chunk", "turn"]]), visibility=rng.choice(SELECTORS),
                as_of=rng.choice([None, t0 + timedelta(days=rng.randrange(-6, 6), microseconds=rng.randrange(-1, 4))]),
                metadata=rng.choice([{}, {"thread": "x"}, {"thread": ["x", "y"]}, {"thread": "z"}]),
            )  # fmt: skip
            now = t0 + timedelta(days=rng.randrange(-6, 6), microseconds=rng.randrange(-1, 4))
            got = [(h.id, h.score) for h in index._with_copy(q.context_id, index._vector_in, q, now, qv, q.k)]
            want = sorted(
                (
                    (d.id, float(np.float32(np.dot(d.vector, qv))))
                    for d in live.values()
                    if d.vector is not None
                    and (q.kinds is None or d.kind in q.kinds)
                    and visible(d.scopes, d.valid_from, d.valid_until, d.metadata, q, now)
                ),
                key=lambda hit: (-hit[1], hit[0]),
            )[: q.k]
            assert [i for i, _ in got] == [i for i, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-5)
            # BM25's statistics are those of what the query may see (its scopes, validity and metadata filters; its
            # kinds aside): as if only that were indexed; it returns those of its kinds
            seen = {d.id: d.text for d in live.values() if visible(d.scopes, d.valid_from, d.valid_until, d.metadata,
                    q, now)}  # fmt: skip
            kept = {i for i in seen if q.kinds is None or live[i].kind in q.kinds}
            stems = [stem(w) for w in rng.sample(WORDS, 2)]
            lexical = dataclasses.replace(q, text=" ".join(stems), vector=None, mode="bm25", k=100)
            scores = {h.id: h.score for h in index._bm25(lexical, now, dict.fromkeys(stems, 1.0), 100)}
            want_scores = {i: x for i, x in (reference(seen, stems) if seen else {}).items() if i in kept}
            assert scores == pytest.approx(want_scores, rel=1e-4)
            n, df = index._with_copy("c", counts, lexical, now, stems)
            assert (n, df) == (len(seen), {t: sum(t in index_terms(x) for x in seen.values()) for t in stems})


def test_a_kept_visibility_mask_changes_exactly_at_each_validity_bound(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`Slots.allowed` keeps a selector's mask for the instants between the validity bounds either side of
    the instant it was made for: asked again at each bound, a microsecond before it and after it (no write
    between), the index keeps what `valid_from <= t < valid_until` keeps."""
    from datetime import timedelta

    index = SqliteSearchIndex(tmp_path / "s.db")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    vec = np.asarray([1.0, 0.0], dtype=np.float32)
    spans = {"a": (None, t0), "b": (t0, t0 + timedelta(days=1)), "c": (t0 + timedelta(hours=5), None)}
    index.upsert([IndexDoc("c", "turn", i, "wing", vec, ["p"], s, u, {}) for i, (s, u) in spans.items()])
    bounds = sorted({b for span in spans.values() for b in span if b is not None})
    instants = [t0 - timedelta(days=1)] + [b + timedelta(microseconds=d) for b in bounds for d in (-1, 0, 1)]
    for order in (instants, instants[::-1], instants[::2] + instants[1::2]):
        for t in order:
            q = SearchQuery("c", vector=vec, mode="vector", k=10, visibility=[["p"]], as_of=t)
            got = sorted(h.id for h in index._with_copy(q.context_id, index._vector_in, q, t, vec, 10))
            want = sorted(i for i, (s, u) in spans.items() if (s is None or s <= t) and (u is None or t < u))
            assert got == want, t


def test_indexed_documents_leave_the_collector_one_object_each(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A full garbage collection stops every caller for as long as it walks the tracked objects. Each indexed
    document's terms and scope tags are tuples of strings and its metadata a dict of plain values, which the
    collector stops tracking: only the row itself is walked (written here, or loaded by another process)."""
    import gc

    index = SqliteSearchIndex(tmp_path / "s.db")
    vec = np.asarray([1.0, 0.0], dtype=np.float32)
    docs = [IndexDoc("c", "turn", f"d{i}", f"wing {WORDS[i % len(WORDS)]}", vec, ["org/a", "user/b"], None, None,
                     {"thread": "x", "n": i}) for i in range(50)]  # fmt: skip
    index.upsert(docs)
    index.search(SearchQuery("c", "wing", mode="bm25", k=1), datetime(2026, 1, 1, tzinfo=UTC))
    loaded = SqliteSearchIndex(tmp_path / "s.db")
    loaded.search(SearchQuery("c", "wing", mode="bm25", k=1), datetime(2026, 1, 1, tzinfo=UTC))
    gc.collect()
    for cache in (index._contexts["c"], loaded._contexts["c"]):
        assert len(cache.pos) == 50
        for slot in cache.pos.values():
            row = cache.rows[slot]
            assert row is not None and row.scopes == ("org/a", "user/b")
            assert not gc.is_tracked(cache.terms[slot]) and cache.terms[slot]
            assert not gc.is_tracked(row.scopes) and not gc.is_tracked(row.metadata)


def test_a_kind_filter_sees_every_write(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A kind filter's mask comes from the pages' slot ranges (a page holds one kind), not from reading each row
    (#54): kinds interleaved over many pages, a delete (a free slot in its page), a slot taken again, a document
    whose kind changes — each filtered search returns what a from-scratch filter over the documents returns."""
    now = datetime.now(UTC)
    index = SqliteSearchIndex(tmp_path / "s.db")
    kinds = ("turn", "attribute", "chunk")
    live: dict[str, str] = {}

    def put(i: str, kind: str) -> None:
        index.upsert([IndexDoc("c", kind, i, f"the valve {i} leaks", None, ["org"])])
        live[i] = kind

    def check() -> None:
        for want in ([k] for k in kinds), [["turn", "chunk"]]:
            for ks in want:
                q = SearchQuery("c", "valve leaks", mode="bm25", k=1000, kinds=ks)
                assert {h.id for h in index.search(q, now)} == {i for i, k in live.items() if k in ks}, ks

    for n in range(300):  # past a page (64 slots) of each kind
        put(f"d{n}", kinds[n % 3 if n < 200 else 0])
    check()
    index.delete("c", ["d0", "d1", "d150"])
    for gone in ("d0", "d1", "d150"):
        del live[gone]
    check()
    put("d400", "turn")  # into the slot d0 left
    put("d2", "turn")  # a chunk that becomes a turn: its old slot is freed
    check()
