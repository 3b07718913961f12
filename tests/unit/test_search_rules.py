from datetime import UTC, datetime

import numpy as np
import pytest

from engram.kernel.ports import Hit, SearchQuery
from engram.search.rules import Rules, VectorsOf, best_first, fuse, hybrid, merge_hits, rrf, smooth
from engram.search.terms import query_terms

# The designs the bench measures beside the default (bench/protocol.py): every refinement, and all but feedback
FULL = Rules("rrf20+feedback+smooth+agree", 20, None, True, True, True, True)
SMOOTHED = Rules("rrf20+smooth+agree", 20, None, False, True, True, True)
RRF20 = Rules("rrf20", rrf_k=20)


def test_fuse_normalises_and_combines() -> None:
    out = fuse([("a", 10.0), ("b", 5.0), ("c", 0.0)], [("b", 0.9), ("c", 0.5), ("a", 0.1)])
    assert [i for i, _ in out][:1] == ["b"]  # b: 0.5*0.5 + 0.5*1.0 beats a: 0.5*1 + 0
    assert all(0.0 <= s <= 1.0 for _, s in out)


def test_fuse_keeps_entries_of_one_list_only() -> None:
    out = dict(fuse([("a", 3.0)], [("b", 0.8), ("c", 0.2)]))
    assert set(out) == {"a", "b", "c"} and out["c"] == 0.0


def test_rrf_orders_by_reciprocal_rank() -> None:
    assert [i for i, _ in rrf([("a", 1), ("b", 1)], [("b", 1), ("a", 1)])] == ["a", "b"]  # tie breaks by id


def test_best_first_is_descending_score_then_id_as_the_tuple_sort_was() -> None:
    rng = np.random.default_rng(25)
    for _ in range(300):  # many ties (a handful of values, both zeros), ids in shuffled order
        n = int(rng.integers(0, 40))
        values = [0.0, -0.0, 0.25, 1.0, 1 / 3, float(np.float32(0.1))]
        pairs = [(f"id{int(i):03d}", values[int(rng.integers(0, len(values)))]) for i in rng.permutation(n)]
        assert best_first(pairs) == sorted(pairs, key=lambda kv: (-kv[1], kv[0]))


def test_query_terms_drop_stop_words_and_duplicates() -> None:
    assert query_terms("What does Alice do at Acme, Alice?") == ["alice", "acme"]


def test_expansion_adds_the_feedback_documents_characteristic_terms() -> None:
    from engram.search.rules import FEEDBACK_ALPHA, expansion, query_weights

    weights = query_weights("wing flutter")
    grown = expansion(weights, ["Flutter of swept wings at transonic speeds.", "Transonic flutter tests."])
    assert grown["wing"] == 1.0 and grown["flutter"] == 1.0  # the query's own terms keep their weight
    assert "transon" in grown and grown["transon"] == max(v for t, v in grown.items() if t not in weights)
    assert abs(sum(v for t, v in grown.items() if t not in weights) - FEEDBACK_ALPHA * 2) < 1e-9


def test_rocchio_moves_the_query_towards_the_feedback_and_keeps_unit_length() -> None:
    from engram.search.rules import rocchio

    q = np.array([1.0, 0.0], dtype=np.float32)
    moved = rocchio(q, [np.array([0.0, 1.0], dtype=np.float32)])
    assert abs(float(np.linalg.norm(moved)) - 1) < 1e-6 and 0 < moved[1] < moved[0]
    assert rocchio(q, []) is q


def test_hybrid_feedback_runs_a_second_round_from_the_first_rounds_best() -> None:
    from engram.kernel.ports import Hit, SearchQuery
    from engram.search.rules import FEEDBACK_DOCS, hybrid

    docs = {f"d{i}": f"passage {i} about flutter" + (" and divergence" if i < 3 else "") for i in range(6)}
    calls: list[tuple[str, object]] = []

    def bm25(weights: object, n: int) -> list[Hit]:
        calls.append(("bm25", dict(weights)))  # type: ignore[call-overload]
        return [Hit(i, "chunk", 6.0 - j, t, {}) for j, (i, t) in enumerate(docs.items())][:n]

    def vector(v: object, n: int) -> list[Hit]:
        calls.append(("vector", np.asarray(v)))
        return [Hit(i, "chunk", 0.9 - j / 10, t, {}) for j, (i, t) in enumerate(docs.items())][:n]

    asked: list[list[str]] = []

    def vectors_of(ids: list[str]) -> dict[str, np.ndarray]:
        asked.append(list(ids))
        return {i: np.array([0.0, 1.0], dtype=np.float32) for i in ids}

    q = np.array([1.0, 0.0], dtype=np.float32)
    plain = hybrid(SearchQuery("c", "flutter", q, "hybrid", 3), bm25, vector, vectors_of, rules=SMOOTHED)
    assert len(plain) == 3 and [c[0] for c in calls] == ["bm25", "vector"]
    # the BM25 list's vectors, then the fused list's, for smoothing
    assert [sorted(a) for a in asked] == [sorted(docs), sorted(docs)]
    calls.clear()
    asked.clear()
    hybrid(SearchQuery("c", "flutter", q, "hybrid", 3), bm25, vector, vectors_of, rules=FULL)
    assert [c[0] for c in calls] == ["bm25", "vector", "bm25", "vector"]
    assert asked[0] == ["d0", "d1", "d2"][:FEEDBACK_DOCS]
    assert sorted(asked[1]) == sorted(asked[2]) == sorted(docs)  # then the BM25 and fused lists', for smoothing
    second_terms = calls[2][1]
    assert isinstance(second_terms, dict) and second_terms["flutter"] == 1.0 and "diverg" in second_terms
    moved = calls[3][1]
    assert isinstance(moved, np.ndarray) and moved[1] > 0  # the query vector moved towards the feedback
    calls.clear()
    hybrid(SearchQuery("c", "flutter", q, "hybrid", 3, match_all=True), bm25, vector, vectors_of, rules=FULL)
    assert len(calls) == 2  # keyword precision: no expansion


def _unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_smooth_lifts_a_passage_whose_neighbours_score_high() -> None:
    from engram.search.rules import smooth

    fused = [("a", 0.05), ("b", 0.044), ("c", 0.042), ("d", 0.0)]
    # c sits next to a (the best); b and d are alone
    vectors = {"a": _unit(1, 0, 0), "b": _unit(0, 1, 0), "c": _unit(1, 0.05, 0), "d": _unit(0, 0, 1)}
    out = smooth(fused, lambda ids: {i: vectors[i] for i in ids})
    assert [i for i, _ in out] == ["a", "c", "b", "d"]
    scores = dict(out)
    assert min(scores.values()) >= 0.0 and max(scores.values()) <= 0.05  # the list's own score range
    assert scores["b"] < 0.044 and scores["c"] > 0.042


def test_smooth_keeps_passages_without_vectors_and_the_tail() -> None:
    from engram.search import rules as search_rules
    from engram.search.rules import smooth

    n = search_rules.SMOOTH_CANDIDATES
    fused = [(f"p{j:03d}", 1.0 - j / (n + 10)) for j in range(n + 5)]
    vectors = {f"p{j:03d}": _unit(1, j % 3, 0) for j in range(1, n)}  # p000 has none (embedding pending)
    asked: list[list[str]] = []

    def vectors_of(ids: list[str]) -> dict[str, object]:
        asked.append(list(ids))
        return {i: vectors[i] for i in ids if i in vectors}

    out = smooth(fused, vectors_of)  # type: ignore[arg-type]
    assert asked == [[i for i, _ in fused[:n]]]  # only the candidates are asked for
    assert dict(out)["p000"] == fused[0][1] and out[0][0] == "p000"  # no vector: its score stays
    assert out[n:] == fused[n:]  # beyond the candidates: untouched, and still below them
    assert sorted(i for i, _ in out) == sorted(i for i, _ in fused)


def test_smooth_leaves_short_or_flat_lists_alone() -> None:
    from engram.search.rules import smooth

    def never(ids: object) -> dict[str, object]:
        raise AssertionError("no vectors needed")

    assert smooth([("a", 1.0)], never) == [("a", 1.0)]  # type: ignore[arg-type]
    assert smooth([("a", 0.5), ("b", 0.5)], never) == [("a", 0.5), ("b", 0.5)]  # type: ignore[arg-type]
    one = smooth([("a", 0.9), ("b", 0.1)], lambda ids: {"a": _unit(1, 0)})
    assert one == [("a", 0.9), ("b", 0.1)]  # fewer than two vectors: nothing to smooth over


def test_hybrid_breaks_a_tie_towards_the_best_passages_neighbour() -> None:
    from engram.kernel.ports import Hit, SearchQuery
    from engram.search.rules import hybrid, merge_hits

    # "far" and "near" hold the same ranks in both lists (fused alone, a tie broken by id: far first);
    # "near" sits next to the best passage
    ranked = [Hit(i, "chunk", 1.0 - j / 10, i, {}) for j, i in enumerate(["best", "far", "near"])]
    mirrored = [ranked[0], ranked[2], ranked[1]]
    vectors = {"best": _unit(1, 0, 0), "near": _unit(1, 0.2, 0), "far": _unit(0, 1, 1)}
    assert [h.id for h in merge_hits(ranked, mirrored, RRF20, 3)] == ["best", "far", "near"]
    for rules in (FULL, SMOOTHED):  # a tie of ranks: the rank fusions
        q = SearchQuery("c", "blade flutter", _unit(1, 1, 0), "hybrid", 3)
        hits = hybrid(
            q, lambda w, n: ranked[:n], lambda v, n: mirrored[:n], lambda ids: {i: vectors[i] for i in ids}, rules=rules
        )
        assert [h.id for h in hits] == ["best", "near", "far"], rules.name


def test_the_bm25_list_is_smoothed_before_fusion() -> None:
    """ "twin" matches fewer keywords than "odd" but sits next to the best keyword match: smoothed, the
    keyword list ranks it second, so it enters fusion ahead of "odd" (the vector list ranks them alike)."""
    from engram.search.rules import smooth_hits

    vectors = {"best": _unit(1, 0, 0), "twin": _unit(1, 0.05, 0), "odd": _unit(0, 1, 0), "v": _unit(0, 0, 1)}
    bm = [_hit("best", 9.0), _hit("odd", 6.0), _hit("twin", 5.9), _hit("low", 1.0)]
    smoothed = smooth_hits(bm, lambda ids: {i: vectors[i] for i in ids if i in vectors})
    assert [h.id for h in smoothed] == ["best", "twin", "odd", "low"]
    assert smoothed[1].text == "text of twin" and smoothed[1].score > 5.9  # the hit kept, the score raised
    vec = [_hit("v", 0.9), _hit("odd", 0.5), _hit("twin", 0.5), _hit("best", 0.4)]
    q = SearchQuery("c", "q", _unit(0, 0, 1), "hybrid", k=4)
    got = over_lists(q, bm, vec, lambda ids: {i: vectors[i] for i in ids if i in vectors}, SMOOTHED)
    assert [h.id for h in got].index("twin") < [h.id for h in got].index("odd")
    plain = merge_hits(bm, vec, RRF20, 4)
    assert [h.id for h in plain].index("twin") > [h.id for h in plain].index("odd")  # the case is real
    # a convex fusion adds the scores, and the fused list's smoothing already smooths BM25's part: once only
    asked: list[list[str]] = []

    def vectors_of(ids: list[str]) -> dict[str, np.ndarray]:
        asked.append(list(ids))
        return {i: vectors[i] for i in ids if i in vectors}

    for rules, times in ((SMOOTHED, 2), (Rules("convex+smooth", vector_weight=0.35, smooth_fused=True), 1)):
        asked.clear()
        q = SearchQuery("c", "q", _unit(0, 0, 1), "hybrid", k=4)
        over_lists(q, bm, vec, vectors_of, rules)
        assert len(asked) == times, rules.name


def over_lists(q: SearchQuery, bm: list[Hit], vec: list[Hit], vectors_of: VectorsOf, rules: Rules) -> list[Hit]:
    """`hybrid` over these two lists as the index's lists (no search of its own)."""
    return hybrid(q, lambda w, n: [], lambda v, n: [], vectors_of, lambda w, v, n: (bm, vec), rules=rules)


def _hit(id_: str, score: float) -> Hit:
    return Hit(id_, "chunk", score, f"text of {id_}", {})


def test_a_small_collection_gets_no_feedback_round() -> None:
    """A travel policy and two invoices: the policy is the only keyword match and the top vector hit. A
    feedback round would learn from all three documents and drift to what the invoices share; with no more
    keyword matches than feedback documents there is none, and the policy stays first."""
    calls: list[int] = []

    def lists(weights: object, vector: object, n: int) -> tuple[list[Hit], list[Hit]]:
        calls.append(n)
        return [_hit("policy", 3.1)], [_hit("policy", 0.62), _hit("invoice-1", 0.55), _hit("invoice-2", 0.54)]

    unit = np.ones(4, dtype=np.float32) / 2
    q = SearchQuery("c", "hotel 250 dollars", unit, "hybrid", k=3)
    got = hybrid(q, lambda w, n: [], lambda v, n: [], lambda ids: {i: unit for i in ids}, lists, rules=FULL)
    assert got[0].id == "policy" and len(calls) == 1


def test_smoothing_never_ranks_below_another_what_both_lists_put_first() -> None:
    """Two near-duplicates just behind an outlier that both lists rank first lift each other in smoothing
    past it; the outlier stays first, at the top score."""
    rng = np.random.default_rng(7)
    vectors = {"outlier": np.array([0, 0, 0, 0, 0, 0, 0, 1], dtype=np.float32)}
    vectors["twin-a"] = vectors["twin-b"] = np.array([1, 0, 0, 0, 0, 0, 0, 0], dtype=np.float32)
    ids = ["outlier", "twin-a", "twin-b"] + [f"tail-{i}" for i in range(30)]
    for i in ids[3:]:
        v = rng.normal(size=8).astype(np.float32)
        vectors[i] = v / np.linalg.norm(v)
    bm = [_hit(i, 10.0 - n * 0.1) for n, i in enumerate(ids)]
    vec = [_hit(i, 0.9 - n * 0.01) for n, i in enumerate(ids)]
    fused = [(h.id, h.score) for h in merge_hits(bm, vec, RRF20, len(ids))]
    smoothed = smooth(fused, lambda got: {i: vectors[i] for i in got})
    assert smoothed[0][0] != "outlier"  # smoothing alone would demote it: the case is real
    q = SearchQuery("c", "q", vectors["outlier"], "hybrid", k=5)
    for rules in (SMOOTHED, Rules("convex+smooth+agree", vector_weight=0.35, smooth_fused=True, agree=True)):
        got = over_lists(q, bm, vec, lambda got: {i: vectors[i] for i in got}, rules)
        assert got[0].id == "outlier" and got[0].score >= got[1].score and len(got) == 5, rules.name


def test_scores_never_rise_down_the_list_and_combine_both_kinds_of_evidence() -> None:
    """`scored`: each hit's evidence is the noisy-OR of lexical and semantic; a hit ranked above one with
    more evidence is lifted to it (the ranking stands, and a threshold keeps a prefix of it)."""
    import numpy as np

    from engram.kernel.ports import Hit, SearchQuery
    from engram.search.rules import noisy_or, scored, semantic_evidence

    q = SearchQuery("c", "red apples", np.array([1.0, 0.0], dtype=np.float32), "hybrid", 3)
    vectors = {"a": np.array([0.0, 1.0]), "b": np.array([1.0, 0.0]), "c": np.array([0.6, 0.8])}
    hits = [Hit(i, "chunk", 0.0, text, {}) for i, text in (("a", "pears"), ("b", "red apples"), ("c", "apples"))]

    def counts(context_id: str, stems: object) -> tuple[int, dict[str, int]]:
        return 10, {"red": 5, "appl": 1}

    out = scored(q, hits, lambda ids: {i: vectors[i] for i in ids}, counts)
    assert [h.id for h in out] == ["a", "b", "c"]  # the ranking is kept
    assert (out[1].lexical, out[1].semantic, out[1].score) == (1.0, 1.0, 1.0)
    assert out[0].lexical == 0 and out[0].semantic == 0 and out[0].score == 1.0  # lifted to b's
    assert 0 < out[2].lexical < 1 and out[2].semantic == pytest.approx(semantic_evidence(0.6), abs=1e-6)
    assert out[2].score == round(noisy_or(out[2].lexical, out[2].semantic), 6)
    assert scored(q, [], lambda ids: {}, counts) == []


def test_a_query_word_counts_as_often_as_the_query_says_it() -> None:
    """Issue #12: CISI's long questions repeat their key words; deduplicated, BM25 lost 0.07 nDCG@10."""
    from engram.search.rules import query_weights
    from engram.search.terms import stem

    assert query_weights("Flows and the flow: which flow?") == {stem("flow"): 3.0}
    assert query_weights("boundary layers of the boundary") == {stem("boundary"): 2.0, stem("layers"): 1.0}


def test_a_query_of_several_sentences_is_embedded_a_sentence_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #12: with SENTENCE_MEAN, the query vector of a many-question query is the normalised mean of its
    sentences'; a one-sentence query is embedded whole. Issue #25 measured it off by default (the whole
    question, as the model reads it plainly): this is the alternative the protocol bench measures."""
    import numpy as np

    from engram.search import rules as search_rules
    from engram.search.rules import query_vector

    whole = query_vector(_Recording(), "How are titles made up? Who reads long abstracts?", ranks=True)  # type: ignore[arg-type]
    assert whole is not None and np.allclose(whole, [1.0, 0.0])  # the default: one vector of the whole question
    monkeypatch.setattr(search_rules, "SENTENCE_MEAN", True)

    e = _Recording()
    one = query_vector(e, "What problems are there in making up descriptive titles?", ranks=True)  # type: ignore[arg-type]
    assert e.calls == [["What problems are there in making up descriptive titles?"]]
    assert one is not None and np.allclose(one, [1.0, 0.0])
    both = query_vector(e, "How are titles made up? Who reads long abstracts? Ok, fine.", ranks=True)  # type: ignore[arg-type]
    assert e.calls[-1] == ["How are titles made up?", "Who reads long abstracts?"]  # "Ok, fine." is too short
    assert both is not None and np.allclose(both, [2**-0.5, 2**-0.5])


def _chunk(id_: str, doc: str, score: float) -> Hit:
    return Hit(id_, "chunk", score, f"text of {id_}", {"document_id": doc})


def test_one_hit_per_document_fuses_documents_not_chunks() -> None:
    """Issue #25: grouped by document, each list ranks a document where its best chunk is, the documents
    are fused, and each is shown by its chunk that fuses best, with the rest as its passages. Here the
    lists' best chunks of document A differ (a1 by keywords, a2 by meaning): chunk by chunk, neither
    reaches the top; as a document, A is first in both lists, and first."""
    bm = [_chunk("a1", "A", 9.0), _chunk("b1", "B", 8.0), _chunk("c1", "C", 7.0), _chunk("a2", "A", 1.0)]
    vec = [_chunk("a2", "A", 0.9), _chunk("b1", "B", 0.85), _chunk("c1", "C", 0.5), _chunk("a1", "A", 0.1)]
    chunks = merge_hits(bm, vec, RRF20, 4)
    assert chunks[0].id == "b1" and {h.id for h in chunks} == {"a1", "a2", "b1", "c1"}  # the case is real
    docs = merge_hits(bm, vec, RRF20, 4, group_by="document_id")
    assert [h.metadata["document_id"] for h in docs] == ["A", "B", "C"]
    assert docs[0].id == "a1" and docs[0].passages == ("a2",)  # a tie of A's chunks: by id
    assert docs[1].passages == () and docs[2].passages == ()
    q = SearchQuery("c", "q", _unit(1, 0), "hybrid", k=10, group_by="document_id")
    for rules in (RRF20, Rules("convex", vector_weight=0.35), FULL):
        got = over_lists(q, bm, vec, lambda ids: {}, rules)
        assert [h.metadata["document_id"] for h in got] == ["A", "B", "C"], rules.name


def test_a_single_list_grouped_keeps_the_best_chunk_and_the_rest_as_passages() -> None:
    from engram.search.rules import grouped

    hits = [_chunk("a1", "A", 3), _chunk("b1", "B", 2), _chunk("a2", "A", 1), Hit("r", "record", 0.5, "r", {})]
    out = grouped(hits, "document_id")
    assert [(h.id, h.passages) for h in out] == [("a1", ("a2",)), ("b1", ()), ("r", ())]
    assert grouped(hits, None) == hits


class _Recording:
    model_id = "fake"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([[1.0, 0.0] if "titles" in t else [0.0, 1.0] for t in texts], dtype=np.float32)


def test_a_hit_is_still_a_frozen_dataclass_with_its_fast_init() -> None:
    """Hit's own __init__ (one dict update, issue #26) keeps what the dataclass gave: defaults, equality,
    `replace`, repr, and no assignment after it."""
    import dataclasses

    h = Hit("a", "turn", 0.5, "text", {"k": 1}, ["s"])
    assert (h.lexical, h.semantic, h.passages) == (0.0, None, ())
    assert h == Hit("a", "turn", 0.5, "text", {"k": 1}, ["s"], 0.0, None, ())
    assert dataclasses.replace(h, score=0.9, semantic=0.2) == h.scored(0.9, 0.0, 0.2) != h
    assert [f.name for f in dataclasses.fields(h)] == [*dataclasses.asdict(h)] and "score=0.5" in repr(h)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.score = 1.0  # type: ignore[misc]


def test_a_ranked_list_makes_only_the_hits_a_hybrid_search_returns() -> None:
    """Issue #26: an adapter's candidate lists as `Ranked` (ids and scores, a hit made when read). Every rule
    set returns the same hits from them as from plain lists; the default makes only the k it returns (plus the
    first of each list where a rule set keeps what both put first)."""
    from engram.kernel.ranked import Ranked
    from engram.search.rules import DEFAULT

    rng = np.random.default_rng(26)
    ids = [f"d{i:03d}" for i in range(200)]
    vectors = {i: _unit(*rng.normal(size=6)) for i in ids}
    bm = [_hit(i, float(s)) for i, s in zip(ids[:150], sorted(rng.random(150) * 9, reverse=True), strict=True)]
    vec = [_hit(i, float(s)) for i, s in zip(ids[50:], sorted(rng.random(150), reverse=True), strict=True)]
    made: list[str] = []

    def ranked(hits: list[Hit]) -> Ranked:
        def make(n: int) -> Hit:
            made.append(hits[n].id)
            return hits[n]

        return Ranked([h.id for h in hits], [h.score for h in hits], make)

    q = SearchQuery("c", "q", _unit(*rng.normal(size=6)), "hybrid", k=10)
    for rules in (DEFAULT, RRF20, SMOOTHED, FULL):
        plain = over_lists(q, bm, vec, lambda got: {i: vectors[i] for i in got}, rules)
        made.clear()
        lazy = hybrid(
            q,
            lambda w, n: [],
            lambda v, n: [],
            lambda got: {i: vectors[i] for i in got},
            lambda w, v, n: (ranked(bm), ranked(vec)),
            rules=rules,
        )
        assert [(h.id, h.score, h.text) for h in lazy] == [(h.id, h.score, h.text) for h in plain], rules.name
        if rules is DEFAULT:
            assert sorted(made) == sorted(h.id for h in lazy)  # ten of 300 candidates
    lazy_list = ranked(bm)
    made.clear()
    assert lazy_list[-1].id == bm[-1].id and [h.id for h in lazy_list[2:4]] == [bm[2].id, bm[3].id]
    assert lazy_list[2] is lazy_list[2] and made == [bm[-1].id, bm[2].id, bm[3].id]  # each made once
    with pytest.raises(IndexError):
        lazy_list[150]


def test_each_index_fuses_by_its_own_rules(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The rules live on the index, not in a module default: set through the engine's guarded index (as the
    protocol bench does), they reach that index's hybrid searches and no other index's."""
    from engram.adapters.local.sqlite_search import SqliteSearchIndex
    from engram.kernel.kinds import KERNEL_KINDS, GuardedIndex, Kinds
    from engram.kernel.ports import IndexDoc
    from engram.search import rules as search_rules

    now = datetime.now(UTC)
    docs = [IndexDoc("c", "chunk", f"d{i}", f"blade flutter {i}", _unit(1, i, 0), ["org"]) for i in range(4)]
    mine, other = SqliteSearchIndex(tmp_path / "a.db"), SqliteSearchIndex(tmp_path / "b.db")
    for index in (mine, other):
        index.upsert(docs)
    guarded = GuardedIndex(mine, Kinds(KERNEL_KINDS))
    assert guarded.rules is mine.rules is other.rules is search_rules.DEFAULT
    asked: list[Rules] = []
    real = search_rules.hybrid

    def spy(*args: object, rules: Rules, **kw: object) -> list[Hit]:
        asked.append(rules)
        return real(*args, rules=rules, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(search_rules, "hybrid", spy)
    guarded.rules = FULL
    q = SearchQuery("c", "flutter", _unit(1, 0, 0), "hybrid", 3)
    assert len(mine.search(q, now)) == 3 and len(other.search(q, now)) == 3
    assert mine.rules is FULL and asked == [FULL, search_rules.DEFAULT]
    assert other.rules is search_rules.DEFAULT is not FULL
