"""Words as search counts them: stop words, Snowball stems, BM25's terms and idf, query terms, token estimates
(the kernel's: every index adapter and every family that budgets text uses these)."""

from __future__ import annotations

import math
import re
import threading

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
WORD = re.compile(r"\w+", re.UNICODE)


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
            import Stemmer  # PyStemmer: the Snowball stemmers in C

            stemmer = _stemmers.english = Stemmer.Stemmer("english")
        found = stemmer.stemWord(word)
        if len(_stems) < 500_000:
            _stems[word] = found
    return found


def index_terms(text: str) -> list[str]:
    """The terms BM25 counts in a document: stems of its words minus stop words, repeats kept."""
    return [stem(w) for w in WORD.findall(text.lower()) if w not in STOP_WORDS]


def term_set(text: str) -> set[str]:
    """The distinct terms of `index_terms(text)`: each distinct word stemmed once (a code window repeats its
    words many times over)."""
    return {stem(w) for w in set(WORD.findall(text.lower())) if w not in STOP_WORDS}


def bm25_idf(docs: int, df: int) -> float:
    """Lucene's BM25 idf: never negative, so a very common term still counts a little."""
    return math.log(1 + (docs - df + 0.5) / (df + 0.5))


def query_terms(text: str) -> list[str]:
    """Lower-cased query words minus English stop words, first occurrence order, deduplicated."""
    seen: dict[str, None] = {}
    for w in WORD.findall(text.lower()):
        if w not in STOP_WORDS and w not in seen:
            seen[w] = None
    return list(seen)


def approx_tokens(text: str) -> int:
    """Token estimate used for budgets: ~4 characters a token (the usual English rule of thumb)."""
    return max(1, (len(text) + 3) // 4)


def matching_terms(query: str, text: str) -> list[str]:
    """The query's words (stop words aside) whose stem the text holds."""
    have = term_set(text)
    words = [w for w in WORD.findall(query.lower()) if w not in STOP_WORDS]
    return list(dict.fromkeys(w for w in words if stem(w) in have))
