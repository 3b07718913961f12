"""The OpenSearch node the SearchIndex adapter will be tested on: k-NN (lucene HNSW, cosine) and the
English analyzer are really there. The adapter's contract tests will share the `opensearch` fixture."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.opensearch


def test_knn_and_english_bm25_answer(opensearch: str) -> None:
    plugins = httpx.get(opensearch + "/_cat/plugins", params={"format": "json"}).json()
    assert "org.opensearch.knn.plugin.KNNPlugin" in {p["component"] for p in plugins}
    mapping = {
        "settings": {"index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0}},
        "mappings": {
            "properties": {
                "text": {"type": "text", "analyzer": "english"},
                "v": {
                    "type": "knn_vector",
                    "dimension": 3,
                    "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"},
                },
            }
        },
    }
    assert httpx.put(opensearch + "/smoke", json=mapping).status_code == 200
    for i, (text, v) in enumerate([("cats sat on mats", [1, 0, 0]), ("dogs run in parks", [0, 1, 0])]):
        r = httpx.put(f"{opensearch}/smoke/_doc/{i}", params={"refresh": "true"}, json={"text": text, "v": v})
        assert r.status_code == 201
    knn = httpx.post(opensearch + "/smoke/_search", json={"query": {"knn": {"v": {"vector": [0.9, 0.1, 0], "k": 2}}}})
    assert [h["_id"] for h in knn.json()["hits"]["hits"]] == ["0", "1"]
    bm25 = httpx.post(opensearch + "/smoke/_search", json={"query": {"match": {"text": "cat"}}})  # stemmed
    assert [h["_id"] for h in bm25.json()["hits"]["hits"]] == ["0"]
