"""How many requests an OpenSearch hybrid search makes (a fake client counts them: the node cannot)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from engram.adapters.aws.opensearch_index import COMPACT, OpenSearchIndex, pack
from engram.kernel.ports import SearchQuery
from engram.search.rules import Rules


class Counting:
    """Answers every search of an `_msearch` with the same four hits: three with compact vectors (two close
    to each other), one without (no vector yet, or written before compact copies existed). Four: more
    keyword matches than feedback documents, so a feedback round happens."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.lists: list[dict[str, Any]] = []  # the searches of the last _msearch, term counts aside

    def _hit(self, i: str, score: float, vector: list[float] | None) -> dict[str, Any]:
        source = {"id": i, "kind": "chunk", "text": f"text {i}", "metadata": {}, "scopes": ["org"]}
        if vector is not None:
            source[COMPACT] = pack(np.array(vector, dtype=np.float32))
        return {"_id": f"c|{i}", "_score": score, "_source": source}

    def msearch(self, index: str, body: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests.append("msearch")
        self.lists = [b for b in body[1::2] if "aggs" not in b]
        hits = [self._hit("a", 0.9, [1, 0]), self._hit("b", 0.8, None), self._hit("c", 0.7, [0.9, 0.1])]
        hits.append(self._hit("d", 0.6, [0.0, 1.0]))
        return {"responses": [self._answer(b, hits) for b in body[1::2]]}

    @staticmethod
    def _answer(body: dict[str, Any], hits: list[dict[str, Any]]) -> dict[str, Any]:
        if "aggs" in body:  # the term counts: ten documents, four of them with each stem
            counts = {a: {"doc_count": 4} for a in body["aggs"]}
            return {"hits": {"total": {"value": 10}, "hits": []}, "aggregations": counts}
        return {"hits": {"hits": hits}}

    def search(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append("search")
        return self._answer(body, [])


def test_a_hybrid_round_is_one_request_and_vectors_come_with_the_hits() -> None:
    client = Counting()
    index = OpenSearchIndex(client, "i", dim=2)
    index._ready = True
    now = datetime.now(UTC)
    plain = index.search(SearchQuery("c", "text", np.array([1.0, 0.0], dtype=np.float32), "hybrid", 3), now)
    assert client.requests == ["msearch"] and {h.id for h in plain} == {"a", "b", "c"}  # k = 3
    assert all(b["_source"]["excludes"] == ["vector"] for b in client.lists)  # compact vectors kept
    assert all(0 <= h.score <= 1 for h in plain)
    client.requests.clear()
    q = SearchQuery("c", "text", np.array([1.0, 0.0], dtype=np.float32), "hybrid", 3)
    index.rules = Rules("feedback", feedback=True, smooth_bm25=True, smooth_fused=True)
    assert len(index.search(q, now)) == 3
    assert client.requests == ["msearch", "msearch"]  # two rounds; feedback and smoothing ask nothing more
    client.requests.clear()
    index.search(SearchQuery("c", "text", mode="bm25", k=3), now)
    assert client.requests == ["msearch"]  # the list and the term counts its scores are weighed with
    client.requests.clear()
    index.search(SearchQuery("c", vector=np.array([1.0, 0.0], dtype=np.float32), mode="vector", k=3), now)
    assert client.requests == ["search"]  # a single list, no terms to count
