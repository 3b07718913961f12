"""Search rules every SearchIndex adapter shares (fusion, filters, query terms), so they rank alike."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import TYPE_CHECKING

from engram.kernel.lazy import module
from engram.kernel.load import give_way
from engram.kernel.ports import Embedder, Hit, SearchQuery, Vector
from engram.kernel.ranked import Finder, Ranked, ranked_ids, ranked_pairs
from engram.search.terms import STOP_WORDS, WORD, bm25_idf, index_terms, query_terms, stem, term_set

# numpy and the Snowball stemmer load when a search first needs them, not when an operation's declaration
# imports these rules (listing tools builds nothing: issue #16)
if TYPE_CHECKING:
    import numpy as np
else:
    np = module("numpy")

# Weight of the vector list in the convex combination of min-max normalised scores, the fusion of every
# hybrid search (DEFAULT below): chosen on LoCoMo before issue #25, and kept by #25's protocol against 0.25
# and 0.5 on all three dev collections (bench/RESULTS.md).
VECTOR_WEIGHT = 0.35
# A rank fusion's k when a rule set asks for one (the benches' baseline is a plain RRF, k = 60).
RRF_K = 60
# Pseudo-relevance feedback, when a rule set asks for it: the best FEEDBACK_DOCS of a first fused round
# expand the BM25 query (relevance-model terms) and move the query vector (Rocchio). Not in DEFAULT: it lifted
# cranfield and cost CISI as much (issue #25, bench/RESULTS.md).
FEEDBACK_DOCS = 3
FEEDBACK_TERMS = 20
FEEDBACK_ALPHA = 1.0  # the expansion terms together weigh this times the query's own terms
FEEDBACK_BETA = 0.5  # the feedback documents' mean vector is added with this weight
# Per list, before fusion; and how many of the fused hits smoothing weighs together. Chosen on the mean of
# cranfield and CISI, checked on LoCoMo (bench/RESULTS.md, issue #12): 50 / 100 -> 150 / 150 lifted all three.
CANDIDATES = 150
MAX_QUERY_TERMS = 256  # a query's BM25 terms (query_weights): well under a search engine's clause limit
# Score regularisation (Diaz 2005, "Regularizing ad hoc retrieval scores"): each of the best
# SMOOTH_CANDIDATES fused hits takes `Rules.smooth_alpha` of its score from its neighbours among them,
# weighted by exp((cosine - 1) / SMOOTH_TAU) — close passages are relevant together. DEFAULT smooths with
# 0.2: the strongest that keeps LoCoMo's session hit at 5 at or above its BM25 list's (0.3 did not: the
# top five gather around one conversation); issue #25, bench/RESULTS.md.
SMOOTH_CANDIDATES = 150
SMOOTH_TAU = 0.03
SMOOTH_ALPHA = 0.3


def best_first(scored: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """(id, score) pairs by descending score, ties by id: the order of `sorted(key=(-score, id))`, from two stable
    sorts with C-level keys (the second keeps the first's id order among equal scores)."""
    ranked = sorted(scored, key=itemgetter(0))
    ranked.sort(key=itemgetter(1), reverse=True)
    return ranked


def _normalise(scored: Sequence[tuple[str, float]]) -> dict[str, float]:
    if not scored:
        return {}
    values = [s for _, s in scored]
    hi, lo = max(values), min(values)
    span = hi - lo
    if span <= 1e-12:
        return {i: 1.0 for i, _ in scored}
    return {i: (s - lo) / span for i, s in scored}


def fuse(
    bm25: Sequence[tuple[str, float]],
    vector: Sequence[tuple[str, float]],
    vector_weight: float = VECTOR_WEIGHT,
) -> list[tuple[str, float]]:
    """Min-max normalise each list, then combine convexly; a missing entry counts 0.

    Inputs are (id, raw score) lists, best first. Output is best first, ties broken by id.
    """
    nb, nv = _normalise(bm25), _normalise(vector)
    bm25_weight = 1 - vector_weight
    fused = {i: bm25_weight * nb.get(i, 0.0) + vector_weight * nv.get(i, 0.0) for i in nb.keys() | nv.keys()}
    return best_first(fused.items())


def combine(
    bm25: Sequence[tuple[str, float]], vector: Sequence[tuple[str, float]], rules: Rules
) -> list[tuple[str, float]]:
    """The fusion of `rules`: reciprocal rank, or a convex combination of normalised scores."""
    if rules.vector_weight is None:
        return rrf(bm25, vector, k=rules.rrf_k)
    return fuse(bm25, vector, rules.vector_weight)


Rerank = Callable[[list[tuple[str, float]]], list[tuple[str, float]]]
"""A fused (id, score) list, best first -> the same ids reordered and rescored."""


def merge_hits(
    bm25: Sequence[Hit],
    vector: Sequence[Hit],
    rules: Rules,
    k: int,
    rerank: Rerank | None = None,
    group_by: str | None = None,
) -> list[Hit]:
    """Hybrid results from the two ranked lists, fused by `combine` (and reranked, if asked). With
    `group_by`, one hit per group: the groups fused by their ranks in each list (a group ranks where its
    best hit does), each shown by the hit of its own that fuses best, with the rest as its `passages`."""
    row = Finder(bm25, vector)
    fused = combine(ranked_pairs(bm25), ranked_pairs(vector), rules)
    passages: dict[str, tuple[str, ...]] = {}
    if group_by is not None:
        bm_groups, vec_groups = group_keys(bm25, group_by), group_keys(vector, group_by)
        group = dict(zip(ranked_ids(bm25), bm_groups, strict=True))
        group.update(zip(ranked_ids(vector), vec_groups, strict=True))  # (the same row in either list)
        members: dict[str, list[str]] = {}
        for i, _ in fused:
            members.setdefault(group[i], []).append(i)
        by_group = combine(first_of_groups(bm25, bm_groups), first_of_groups(vector, vec_groups), rules)
        fused = [(members[g][0], s) for g, s in by_group]
        passages = {m[0]: tuple(m[1:]) for m in members.values()}
    if rerank is not None:
        fused = rerank(fused)
    out = []
    row.ahead(i for i, _ in fused[:k])  # the returned hits' rows read together
    for i, s in fused[:k]:
        h = row(i)
        out.append(Hit(i, h.kind, s, h.text, h.metadata, h.scopes, passages=passages.get(i, ())))
    return out


BM25Search = Callable[[Mapping[str, float], int], Sequence[Hit]]
"""(stem -> weight, how many) -> BM25 hits of an adapter, every filter applied."""
VectorSearch = Callable[[Vector, int], Sequence[Hit]]
"""(query vector, how many) -> vector hits of an adapter, every filter applied."""
Lists = Callable[[Mapping[str, float], "Vector | None", int], tuple[Sequence[Hit], Sequence[Hit]]]
"""(stems, query vector or None, how many) -> (BM25 hits, vector hits): both lists of a round at once, for
an adapter that can ask for them in one request. Without it, `lists_of` asks its two searches in turn."""
VectorsOf = Callable[[Sequence[str]], dict[str, Vector]]
"""(document ids) -> the stored vectors of those that have one, for feedback and smoothing."""


def query_weights(text: str) -> dict[str, float]:
    """The BM25 terms of a query: its stems (stop words aside), each weighted by how often the query says
    it, as a Lucene query of the same words scores them (a question that repeats its key word means it).
    At most MAX_QUERY_TERMS of them, the most said first (a query of 1,182 distinct short words went past
    OpenSearch's 1,024 clauses, a 500; CISI's longest question has 130)."""
    weights: dict[str, float] = {}
    for w in WORD.findall(text.lower()):
        if w not in STOP_WORDS:
            t = stem(w)
            weights[t] = weights.get(t, 0.0) + 1.0
    if len(weights) > MAX_QUERY_TERMS:
        kept = set(sorted(weights, key=lambda t: -weights[t])[:MAX_QUERY_TERMS])  # stable: first said first
        weights = {t: w for t, w in weights.items() if t in kept}
    return weights


def expansion(weights: Mapping[str, float], texts: Sequence[str]) -> dict[str, float]:
    """The query's terms plus the FEEDBACK_TERMS most characteristic terms of `texts` (their mean
    relative frequency), which together weigh FEEDBACK_ALPHA times the query's terms."""
    mass: dict[str, float] = {}
    for text in texts:
        terms = index_terms(text)
        for t in terms:
            mass[t] = mass.get(t, 0.0) + 1.0 / (len(terms) * len(texts))
    extra = sorted(((t, v) for t, v in mass.items() if t not in weights), key=lambda tv: (-tv[1], tv[0]))
    extra = extra[:FEEDBACK_TERMS]
    total = sum(v for _, v in extra) or 1.0
    out = dict(weights)
    for t, v in extra:
        out[t] = FEEDBACK_ALPHA * sum(weights.values()) * v / total
    return out


def rocchio(vector: Vector, feedback: Sequence[Vector]) -> Vector:
    """The query vector moved towards the mean of the feedback documents' vectors, unit length again."""
    if not feedback:
        return vector
    moved = np.asarray(vector, dtype=np.float32) + FEEDBACK_BETA * np.mean(np.asarray(feedback), axis=0)
    norm = float(np.linalg.norm(moved))
    return moved / norm if norm else np.asarray(vector, dtype=np.float32)


def smooth(
    fused: list[tuple[str, float]], vectors_of: VectorsOf, alpha: float = SMOOTH_ALPHA
) -> list[tuple[str, float]]:
    """Score regularisation over the best SMOOTH_CANDIDATES of a fused list: min-max normalised scores,
    each passage with a vector mixed with its neighbours' (softmax of cosine / SMOOTH_TAU), mapped back to
    the list's score range so the rest of the list stays below and thresholds keep their scale."""
    top, rest = fused[:SMOOTH_CANDIDATES], fused[SMOOTH_CANDIDATES:]
    scores = np.array([s for _, s in top], dtype=np.float64)
    if len(top) < 2 or float(scores.max() - scores.min()) <= 1e-12:
        return fused
    lo, hi = float(scores.min()), float(scores.max())
    vectors = vectors_of([i for i, _ in top])
    have = [j for j, (i, _) in enumerate(top) if i in vectors]
    if len(have) < 2:
        return fused
    span = hi - lo
    f0 = (scores - lo) / span
    v = np.array([vectors[top[j][0]] for j in have], dtype=np.float64)
    v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    w = v @ v.T  # the same operations as exp((v @ v.T - 1) / tau), in place
    w -= 1.0
    w /= SMOOTH_TAU
    np.exp(w, out=w)
    np.fill_diagonal(w, 0.0)
    w /= np.maximum(w.sum(axis=1, keepdims=True), 1e-300)
    f = f0.copy()
    f[have] = (1 - alpha) * f0[have] + alpha * (w @ f0[have])
    return best_first([(i, lo + x * span) for (i, _), x in zip(top, f.tolist(), strict=True)]) + rest


def smooth_hits(hits: Sequence[Hit], vectors_of: VectorsOf) -> list[Hit]:
    """`hits` reordered and rescored by `smooth`."""
    row = Finder(hits)
    return [row(i).scored(s, row(i).lexical, row(i).semantic) for i, s in smooth(ranked_pairs(hits), vectors_of)]


def lists_of(bm25: BM25Search, vector: VectorSearch) -> Lists:
    """Both lists of a round from an adapter's two searches, one after the other; an empty query asks
    neither (no stems: no BM25 search; no vector: no vector search)."""

    def both(weights: Mapping[str, float], v: Vector | None, n: int) -> tuple[Sequence[Hit], Sequence[Hit]]:
        return (bm25(weights, n) if weights else []), (vector(v, n) if v is not None else [])

    return both


@dataclass(frozen=True)
class Rules:
    """How a hybrid search makes one list of its two: the fusion (RRF with `rrf_k`, or, with `vector_weight`,
    a convex combination of min-max normalised scores), and the optional refinements — a feedback round
    (`feedback`), the BM25 list smoothed over its hits' neighbours before fusion (`smooth_bm25`), the fused
    list after it (`smooth_fused`, with `smooth_alpha`), and what both lists put first kept first (`agree`)."""

    name: str
    rrf_k: int = 60
    vector_weight: float | None = None
    feedback: bool = False
    smooth_bm25: bool = False
    smooth_fused: bool = False
    agree: bool = False
    smooth_alpha: float = SMOOTH_ALPHA  # how much of a passage's fused score its neighbours give


# The rules of every hybrid search (documents, memory, conversations, records), chosen by the protocol of
# issue #25 (bench/protocol.py, bench/RESULTS.md): each candidate design chosen on two dev collections
# (cranfield, CISI, LoCoMo) and checked on the third, all three ways; this one was chosen in every fold and
# held on every held-out collection. Each index holds the rules it fuses by (`SearchIndex.rules`, this unless
# told otherwise); the benches set another there to measure it.
DEFAULT = Rules("convex0.35+smooth(0.2)", vector_weight=VECTOR_WEIGHT, smooth_fused=True, smooth_alpha=0.2)


def group_of(hit: Hit, key: str | None) -> str:
    """The group of a hit: its metadata `key`'s value (a hit without one is a group of its own)."""
    return _group(key, hit.metadata.get(key) if key is not None else None, hit.id)


def _group(key: str | None, value: object, hit_id: str) -> str:
    """A group's name: `key`'s value, or the hit's own id when it has none."""
    return f"{key}={value}" if value not in (None, "") else f"id={hit_id}"


def group_keys(hits: Sequence[Hit], key: str) -> list[str]:
    """`group_of` each hit, in order: a `Ranked` list's from the one value of each row (no hit made — grouping made
    every candidate of both lists, their rows read from SQLite: half of a `knowledge_search` at 100k chunks, #54)."""
    values = hits.values(key) if isinstance(hits, Ranked) else None
    if values is None:
        return [group_of(h, key) for h in hits]
    return [_group(key, v, i) for i, v in zip(ranked_ids(hits), values, strict=True)]


def first_of_groups(hits: Sequence[Hit], groups: list[str]) -> list[tuple[str, float]]:
    """(group, score) of each group's first hit (`groups`: each hit's, `group_keys`), in list order."""
    first: dict[str, float] = {}
    for g, (_, score) in zip(groups, ranked_pairs(hits), strict=True):
        first.setdefault(g, score)
    return list(first.items())


def grouped(hits: Sequence[Hit], key: str | None) -> list[Hit]:
    """`hits`, one a group (the first), each with the rest of its group as `passages` (in list order); only the
    groups' first hits are made."""
    if key is None:
        return list(hits)
    members: dict[str, list[int]] = {}
    for n, g in enumerate(group_keys(hits, key)):
        members.setdefault(g, []).append(n)
    if isinstance(hits, Ranked):
        hits.prepare([m[0] for m in members.values()])  # their rows read together
    ids = ranked_ids(hits)
    return [replace(hits[m[0]], passages=tuple(ids[n] for n in m[1:])) for m in members.values()]


def hybrid(
    query: SearchQuery,
    bm25: BM25Search,
    vector: VectorSearch,
    vectors_of: VectorsOf,
    both: Lists | None = None,
    *,
    rules: Rules = DEFAULT,
) -> list[Hit]:
    """The hybrid search every adapter runs, over its own BM25 and vector searches: both lists (at least
    CANDIDATES each, one hit per group when the query groups), fused by the index's `rules`."""
    k = max(0, query.k)
    pool = max(CANDIDATES, k)
    weights = query_weights(query.text)
    lists = both or lists_of(bm25, vector)

    group = query.group_by
    bm, vec = lists(weights, query.vector, pool)
    give_way()  # (the lists made, no lock held: engram.kernel.load)
    if query.match_all:  # keyword precision: only what every term matches
        keep = set(ranked_ids(bm))
        vec = [vec[n] for n, i in enumerate(ranked_ids(vec)) if i in keep]
    elif rules.feedback and query.vector is not None and len(bm) > FEEDBACK_DOCS:
        # Feedback needs a collection to learn from: with no more keyword matches than feedback documents
        # (a handful of documents), the "best documents" are simply all of them, and the second round
        # drifts to whatever they share (found on a three-document collection: issue #11).
        best = merge_hits(bm, vec, rules, FEEDBACK_DOCS, group_by=group)
        weights = expansion(weights, [h.text for h in best])
        bm, vec = lists(weights, rocchio(query.vector, list(vectors_of([h.id for h in best]).values())), pool)
    # What both lists put first stays first, whatever fusion and smoothing make of the rest.
    agreed = bm[0] if rules.agree and bm and vec and group_of(bm[0], group) == group_of(vec[0], group) else None
    if rules.smooth_bm25:
        bm = smooth_hits(bm, vectors_of)
    rerank: Rerank | None = (
        (lambda fused: smooth(fused, vectors_of, rules.smooth_alpha)) if rules.smooth_fused else None
    )
    return first(merge_hits(bm, vec, rules, k, rerank, group), agreed, k, group)


def first(hits: list[Hit], agreed: Hit | None, k: int, group_by: str | None = None) -> list[Hit]:
    """`hits` with `agreed` (the document both fused lists ranked first) at the top, at the top score:
    fusion and smoothing may reorder the rest, never rank it below another."""
    if agreed is None or not hits or group_of(hits[0], group_by) == group_of(agreed, group_by):
        return hits
    top = group_of(agreed, group_by)
    found = next((h for h in hits if group_of(h, group_by) == top), agreed)
    return [replace(found, score=hits[0].score), *(h for h in hits if group_of(h, group_by) != top)][:k]


def search(
    query: SearchQuery,
    bm25: BM25Search,
    vector: VectorSearch,
    vectors_of: VectorsOf,
    counts: TermCounts,
    both: Lists | None = None,
    terms_in: TermsIn | None = None,
    *,
    rules: Rules = DEFAULT,
) -> list[Hit]:
    """A SearchQuery in any mode over an adapter's BM25 and vector searches (what `SearchIndex.search`
    does in every adapter): ranked by the mode's rules, scored by `scored` (with `terms_in`, the adapter's
    own record of which stems each hit holds, instead of tokenising the hits' texts again)."""
    k = max(0, query.k)
    if k == 0:
        return []
    n = max(CANDIDATES, k) if query.group_by else k  # grouping drops hits: enough of them to fill k
    if query.mode == "hybrid":
        hits = hybrid(query, bm25, vector, vectors_of, both, rules=rules)
    elif query.mode == "bm25":
        weights = query_weights(query.text)
        hits = grouped(bm25(weights, n), query.group_by)[:k] if weights else []
    else:
        hits = grouped(vector(query.vector, n), query.group_by)[:k] if query.vector is not None else []
    give_way()
    return scored(query, hits, vectors_of, counts, terms_in)


# -- scores -------------------------------------------------------------------------------------------
# Every result's score is in [0, 1] and says how strongly the passage matches the query, on one scale in
# every mode (the mode chooses and orders the results; it does not change what a score says) and on every
# collection (docs/tools.md "Scores"). Two kinds of evidence, each mapped linearly from its NONE (0) to its FULL
# (1) and clipped:
# - lexical: the share of the query's information (its stems weighted by idf, stop words aside) that the
#   passage contains;
# - semantic: the cosine of passage and query vectors (none without an embedder);
# and the score is either of them (noisy-OR: 1 - (1 - lexical) (1 - semantic)). Down a result list the score
# never rises: each hit scores at least what any hit below it scores. The four bounds are chosen so that a
# threshold of 0.5 keeps the judged-relevant top-10 hits and drops those of queries from another collection,
# on every dev collection (`make bench BENCH=scores`, bench/RESULTS.md).
LEXICAL_NONE, LEXICAL_FULL = 0.1, 0.8  # a score of 0.5 from lexical evidence alone: 45 % of the query
SEMANTIC_NONE, SEMANTIC_FULL = 0.1, 0.7  # ... from semantic evidence alone: cosine 0.4 (all-MiniLM-L6-v2)

TermCounts = Callable[[str, Sequence[str]], tuple[int, Mapping[str, int]]]
"""(context id, stems) -> (documents in the context, how many of them contain each stem)."""
TermsIn = Callable[[Sequence[str], Sequence[str]], Mapping[str, set[str]]]
"""(hit ids, stems) -> the stems each hit's text holds (as `term_set` of its text would say)."""


def _scale(value: float, none: float, full: float) -> float:
    return min(1.0, max(0.0, (value - none) / (full - none)))


def query_vector(embedder: Embedder | None, text: str, ranks: bool) -> Vector | None:
    """The query's vector, for ranking (`ranks`: vector and hybrid modes; a failure is the search's) or for
    scoring only (bm25 mode: a failure leaves the scores lexical, and the search answers)."""
    if embedder is None:
        return None
    try:
        parts = query_sentences(text)
        if len(parts) == 1:
            vector: Vector = embedder.embed(parts)[0]
            return vector
        mean: Vector = np.asarray(embedder.embed(parts), dtype=np.float32).mean(axis=0)
        return (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)
    except Exception:
        if ranks:
            raise
        logging.getLogger("engram.search").warning("query embedding failed: scores are lexical only", exc_info=True)
        return None


SENTENCE_MEAN = False  # a query of several sentences: the mean of their vectors (`query_sentences`); see there
# The usual boundary heuristic: an end mark, space, then a capital ("i.e. the", "vs. them" do not end one)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")


def query_sentences(text: str) -> list[str]:
    """What a query's vector is the mean of: with SENTENCE_MEAN, its sentences of three content words or
    more, when it has several; else the whole query. Issue #12 chose the mean on CISI (hybrid 0.457 -> 0.469
    then); issue #25's protocol dropped it: with one hit per document and the fusion chosen there it moved
    CISI by -0.0002 (0.4723 -> 0.4721) and nothing else, and the same model read plainly is what a
    collection of multi-sentence questions nobody tuned on did better with."""
    if not SENTENCE_MEAN:
        return [text]
    parts = [p for p in _SENTENCE_END.split(text.strip()) if len(query_terms(p)) >= 3]
    return parts if len(parts) > 1 else [text]


def semantic_evidence(cosine: float) -> float:
    return _scale(cosine, SEMANTIC_NONE, SEMANTIC_FULL)


def lexical_evidence(
    weights: Mapping[str, float], idf: Mapping[str, float], text: str, present: set[str] | None = None
) -> float:
    """The idf-weighted share of the query's stems that `text` contains (`present`: its stems, when known),
    scaled."""
    total = sum(w * idf[t] for t, w in weights.items())
    if total <= 0:
        return 0.0
    if present is None:
        present = term_set(text)
    return _scale(sum(w * idf[t] for t, w in weights.items() if t in present) / total, LEXICAL_NONE, LEXICAL_FULL)


def noisy_or(*evidence: float) -> float:
    miss = 1.0
    for e in evidence:
        miss *= 1.0 - e
    return 1.0 - miss


def scored(
    query: SearchQuery, hits: list[Hit], vectors_of: VectorsOf, counts: TermCounts, terms_in: TermsIn | None = None
) -> list[Hit]:
    """`hits` (ranked) with their scores on the scale above (and each kind of evidence on its own)."""
    if not hits:
        return hits
    lexical = [0.0] * len(hits)
    weights = query_weights(query.text)
    if weights:
        docs, df = counts(query.context_id, list(weights))
        idf = {t: bm25_idf(docs, df.get(t, 0)) for t in weights}
        held = terms_in([h.id for h in hits], list(weights)) if terms_in is not None else {}
        lexical = [lexical_evidence(weights, idf, h.text, held.get(h.id)) for h in hits]
    semantic: list[float | None] = [None] * len(hits)
    if query.vector is not None:
        if query.mode == "vector":
            cosines = {h.id: h.score for h in hits}
        else:
            qv = np.asarray(query.vector, dtype=np.float32)
            stored = vectors_of([h.id for h in hits])
            cosines = {i: float(np.dot(qv, np.asarray(v, dtype=np.float32))) for i, v in stored.items()}
        semantic = [semantic_evidence(cosines[h.id]) if h.id in cosines else 0.0 for h in hits]
    out, floor = [], 0.0
    for h, lex, sem in reversed(list(zip(hits, lexical, semantic, strict=True))):
        floor = max(floor, noisy_or(lex, sem or 0.0))
        sem_ = None if sem is None else round(sem, 6)
        out.append(h.scored(round(floor, 6), round(lex, 6), sem_))
    return out[::-1]


def rrf(*lists: Sequence[tuple[str, float]], k: int | None = None) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: sum of 1 / (k + rank), k = RRF_K unless given."""
    k = RRF_K if k is None else k
    fused: dict[str, float] = {}
    for ranked in lists:
        for rank, (i, _) in enumerate(ranked):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank + 1)
    return best_first(fused.items())
