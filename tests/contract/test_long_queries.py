"""A query of as many distinct words as its 4,000 characters hold, on both adapter sets: OpenSearch refused it
(1,182 terms past its 1,024 clauses: a 500); a query's BM25 terms are now at most MAX_QUERY_TERMS, the most
said first, on every index alike."""

from __future__ import annotations

import itertools
import string

from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.kernel.caller import ANY
from engram.search.rules import MAX_QUERY_TERMS, query_weights
from engram.wiring import Engram

LETTERS = string.ascii_lowercase


def widest_query() -> str:
    """Distinct words, shortest first, to 4,000 characters (a query's limit)."""
    words = [*LETTERS, *("".join(t) for n in (2, 3) for t in itertools.product(LETTERS, repeat=n))]
    return " ".join(words)[:4000].rsplit(" ", 1)[0]


def test_a_query_of_a_thousand_distinct_words_is_answered(both: Engram) -> None:
    e = both
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    doc = e.documents.ingest(caller, NewDocument(b"The zz valve and the ab pump.", "Valves"))
    query = "zz zz zz " + widest_query()  # said three times more: among the terms kept
    assert len(query.split()) > 1100 and len(query) <= 4010
    for mode in ("bm25", "hybrid"):
        found = e.documents.search(caller, Search(query, mode, 5))["results"]
        assert found and found[0]["document_id"] == doc["id"], mode
    recalled = e.memory.recall(caller, query, k=3)
    assert isinstance(recalled["results"], list)


def test_a_querys_terms_are_bounded_keeping_the_most_said() -> None:
    weights = query_weights("zz zz " + widest_query())
    assert len(weights) == MAX_QUERY_TERMS and weights["zz"] == 3.0
    assert list(weights)[:4] == ["zz", "b", "c", "d"]  # in the query's order ("a" is a stop word)
