"""Search rules every SearchIndex adapter shares (fusion, filters, query terms), so they rank alike."""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime

import snowballstemmer

from engram.ports import Hit, MetaValue, SearchQuery
from engram.scopes import matches

# Weight of the vector list in the convex combination; measured best on conversation turns (LoCoMo,
# bench/RESULTS.md), where BM25 is the stronger list.
VECTOR_WEIGHT = 0.35
RRF_K = 60
CANDIDATES = 50  # per list, before fusion


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
    fused = {i: (1 - vector_weight) * nb.get(i, 0.0) + vector_weight * nv.get(i, 0.0) for i in nb.keys() | nv.keys()}
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


def combine(
    bm25: Sequence[tuple[str, float]], vector: Sequence[tuple[str, float]], fusion: str
) -> list[tuple[str, float]]:
    """The hybrid rule every SearchIndex adapter applies."""
    return rrf(bm25, vector) if fusion == "rrf" else fuse(bm25, vector)


def merge_hits(bm25: Sequence[Hit], vector: Sequence[Hit], fusion: str, k: int) -> list[Hit]:
    """Hybrid results from the two ranked lists, fused by `combine`."""
    rows = {h.id: h for h in bm25} | {h.id: h for h in vector}
    fused = combine([(h.id, h.score) for h in bm25], [(h.id, h.score) for h in vector], fusion)
    return [Hit(i, rows[i].kind, s, rows[i].text, rows[i].metadata, rows[i].scopes) for i, s in fused[:k]]


def rrf(*lists: Sequence[tuple[str, float]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal rank fusion: sum of 1 / (k + rank). Measured best on documents (cranfield)."""
    fused: dict[str, float] = {}
    for ranked in lists:
        for rank, (i, _) in enumerate(ranked):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank + 1)
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))


def valid_at(valid_from: datetime | None, valid_until: datetime | None, t: datetime) -> bool:
    """Valid-time rule: valid_from <= t < valid_until (open ends where None)."""
    return (valid_from is None or valid_from <= t) and (valid_until is None or t < valid_until)


def metadata_matches(metadata: Mapping[str, MetaValue], wanted: Mapping[str, MetaValue | Sequence[MetaValue]]) -> bool:
    for key, want in wanted.items():
        have = metadata.get(key)
        if isinstance(want, list | tuple):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


def in_ranges(
    metadata: Mapping[str, MetaValue], ranges: Mapping[str, tuple[MetaValue | None, MetaValue | None]]
) -> bool:
    for key, (lo, hi) in ranges.items():
        have = metadata.get(key)
        if have is None:
            return False
        try:
            if (lo is not None and have < lo) or (hi is not None and have > hi):  # type: ignore[operator]
                return False
        except TypeError:
            return False
    return True


def visible(
    doc_scopes: Sequence[str],
    valid_from: datetime | None,
    valid_until: datetime | None,
    metadata: Mapping[str, MetaValue],
    query: SearchQuery,
    now: datetime,
) -> bool:
    """Every non-text filter of a SearchQuery, in one place."""
    return (
        valid_at(valid_from, valid_until, query.as_of or now)
        and matches(doc_scopes, query.visibility)
        and metadata_matches(metadata, query.metadata)
        and in_ranges(metadata, query.ranges)
    )


STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)


# BM25 as both index adapters score it (OpenSearch: the index's similarity and analyzer say the same):
# words (\w+, lower-cased) minus the stop words above, Snowball English stems, k1 1.5, b 0.75.
# Measured on cranfield against FTS5's fixed k1 1.2 and Porter stems: bench/RESULTS.md.
BM25_K1, BM25_B = 1.5, 0.75
_stemmers = threading.local()
_stems: dict[str, str] = {}


def stem(word: str) -> str:
    found = _stems.get(word)
    if found is None:
        stemmer = getattr(_stemmers, "english", None)
        if stemmer is None:  # a Snowball stemmer keeps state: one per thread
            stemmer = _stemmers.english = snowballstemmer.stemmer("english")
        found = stemmer.stemWord(word)
        if len(_stems) < 500_000:
            _stems[word] = found
    return found


def index_terms(text: str) -> list[str]:
    """The terms BM25 counts in a document: stems of its words minus stop words, repeats kept."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]


def bm25_idf(docs: int, df: int) -> float:
    """Lucene's BM25 idf: never negative, so a very common term still counts a little."""
    return math.log(1 + (docs - df + 0.5) / (df + 0.5))


def query_terms(text: str) -> list[str]:
    """Lower-cased query words minus English stop words, first occurrence order, deduplicated."""
    seen: dict[str, None] = {}
    for w in _WORD.findall(text.lower()):
        if w not in STOP_WORDS and w not in seen:
            seen[w] = None
    return list(seen)
