"""The OpenSearch SearchIndex against the same contract suite as the embedded one, on a real node."""

from __future__ import annotations

import uuid

import pytest
from opensearchpy import OpenSearch

from engram.adapters.aws.opensearch_index import OpenSearchIndex
from engram.adapters.aws.opensearch_queries import bm25_body
from engram.search.rules import Rules
from tests.contract.suites import SearchIndexContract

pytestmark = pytest.mark.opensearch


class TestOpenSearchIndex(SearchIndexContract):
    @pytest.fixture
    def index(self, opensearch: str) -> OpenSearchIndex:
        client = OpenSearch(hosts=[opensearch], timeout=30)
        return OpenSearchIndex(client, f"engram-{uuid.uuid4().hex[:8]}", dim=8)


class TestOpenSearchServerlessIds(SearchIndexContract):
    """The same contract with the ids OpenSearch Serverless vector collections impose (OpenSearch picks
    `_id`; replaces and deletes go by the `key` field). The node still refreshes, so this checks the
    logic; Serverless's ~10 s visibility delay is covered by the newest-copy rule tested below."""

    @pytest.fixture
    def index(self, opensearch: str) -> OpenSearchIndex:
        client = OpenSearch(hosts=[opensearch], timeout=30)
        return OpenSearchIndex(client, f"engram-{uuid.uuid4().hex[:8]}", dim=8, custom_ids=False)


def test_a_lingering_older_copy_is_never_returned(opensearch: str) -> None:
    from datetime import UTC, datetime

    from engram.kernel.ports import IndexDoc, SearchQuery

    client = OpenSearch(hosts=[opensearch], timeout=30)
    name = f"engram-{uuid.uuid4().hex[:8]}"
    index = OpenSearchIndex(client, name, dim=8, custom_ids=False)
    index.upsert([IndexDoc("c", "fact", "f1", "the old colour is red", None, ["org"], None, None, {})])
    old = client.search(index=name, body={"query": {"match_all": {}}})["hits"]["hits"][0]["_source"]
    index.upsert([IndexDoc("c", "fact", "f1", "the new colour is teal", None, ["org"], None, None, {})])
    # what Serverless can leave for a while: the old copy, not yet visible to the replace's search
    client.index(index=name, body=dict(old, indexed_at=old["indexed_at"] - 1), refresh="wait_for")
    hits = index.search(SearchQuery("c", "colour", mode="bm25", k=5), datetime.now(UTC))
    assert [(h.id, h.text) for h in hits] == [("f1", "the new colour is teal")]


def test_a_contexts_count_is_reused_until_a_write_or_its_ttl(opensearch: str) -> None:
    """A recall asks for the count each time: it is asked of OpenSearch at most every COUNT_TTL seconds,
    and again at once after a write through this index; a write by another process shows after the TTL."""
    from engram.adapters.aws.opensearch_index import COUNT_TTL
    from engram.kernel.ports import IndexDoc

    client = OpenSearch(hosts=[opensearch], timeout=30)
    name = f"engram-{uuid.uuid4().hex[:8]}"
    clock = [1000.0]
    index = OpenSearchIndex(client, name, dim=8, refresh=True)
    other = OpenSearchIndex(client, name, dim=8, refresh=True)  # another Lambda instance
    index.monotonic = lambda: clock[0]

    def doc(i: str) -> IndexDoc:
        return IndexDoc("c", "fact", i, f"fact number {i}", None, ["org"], None, None, {})

    assert index.count("c") == 0
    index.upsert([doc("a"), doc("b")])
    assert index.count("c") == 2  # its own write: asked again
    other.upsert([doc("x")])
    assert index.count("c") == 2  # within the TTL: the known count
    clock[0] += COUNT_TTL + 1
    assert index.count("c") == 3
    index.delete("c", ["a"])
    assert index.count("c") == 2


def test_an_index_made_before_the_compact_vectors_still_serves_them(opensearch: str) -> None:
    """An index created by an earlier version (no compact copy of the vectors) gets the field on first use;
    its documents' full vectors serve feedback and smoothing until they are written again."""
    from datetime import UTC, datetime

    import numpy as np

    from engram.adapters.aws.opensearch_index import COMPACT, COMPACT_MAPPING
    from engram.kernel.ports import IndexDoc, SearchQuery

    client = OpenSearch(hosts=[opensearch], timeout=30)
    name = f"engram-{uuid.uuid4().hex[:8]}"
    OpenSearchIndex(client, name, dim=4).ensure()
    mapping = client.indices.get_mapping(index=name)[name]["mappings"]
    analysis = client.indices.get_settings(index=name)[name]["settings"]["index"]["analysis"]
    assert mapping["properties"][COMPACT] == COMPACT_MAPPING[COMPACT]
    client.indices.delete(index=name)  # now as an older version made it: without the field
    old_mapping = {k: v for k, v in mapping["properties"].items() if k != COMPACT}
    settings = {"index": {"knn": True}, "analysis": analysis}
    client.indices.create(index=name, body={"settings": settings, "mappings": {"properties": old_mapping}})
    old_vector = [1.0, 0.0, 0.0, 0.0]
    old = {"context_id": "c", "kind": "chunk", "id": "old", "key": "c|old", "indexed_at": 1, "text": "wing flutter",
           "scopes": ["org"], "metadata": {}, "vector": old_vector}  # fmt: skip
    client.index(index=name, id="c|old", body=old, refresh=True)
    index = OpenSearchIndex(client, name, dim=4, refresh=True)
    index.upsert(
        [IndexDoc("c", "chunk", "new", "wing flutter tests", np.array([0.6, 0.8, 0, 0], dtype=np.float32), ["org"])]
    )
    assert client.indices.get_mapping(index=name)[name]["mappings"]["properties"][COMPACT] == COMPACT_MAPPING[COMPACT]
    got = index.vectors("c", ["old", "new"])
    assert np.allclose(got["old"], old_vector) and np.allclose(got["new"], [0.6, 0.8, 0, 0], atol=1e-3)
    index.rules = Rules("feedback", feedback=True)
    hits = index.search(
        SearchQuery("c", "flutter", np.array([1, 0, 0, 0], dtype=np.float32), "hybrid", 5), datetime.now(UTC)
    )
    assert {h.id for h in hits} == {"old", "new"}


def test_bm25_agrees_with_the_embedded_index_and_counts_repeated_query_words(opensearch: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue #12: both adapters score BM25 alike, a repeated query word included (it counts as often as the
    query says it, as a Lucene query of the same words does). OpenSearch's BM25 similarity keeps the
    (k1 + 1) factor, as ours does; it stores document lengths in one byte, hence the 3 % allowed."""
    from datetime import UTC, datetime

    from engram.adapters.local.sqlite_search import SqliteSearchIndex
    from engram.kernel.ports import IndexDoc, SearchQuery
    from engram.search.rules import query_weights

    texts = [
        "boundary layer flow over a flat plate at high speed",
        "flow separation in a turbulent boundary layer near the trailing edge of the wing",
        "heat transfer in laminar flow through pipes",
        "the flow flow flow of a viscous fluid",
        "shock waves and boundary layer interaction in supersonic flow over cones and plates",
        "an essay on library classification with no aerodynamics at all",
    ]
    docs = [IndexDoc("c", "chunk", f"d{i}", t, None, ["org"], None, None, {}) for i, t in enumerate(texts)]
    local = SqliteSearchIndex(tmp_path / "s.db")
    remote = OpenSearchIndex(OpenSearch(hosts=[opensearch], timeout=30), f"engram-{uuid.uuid4().hex[:8]}", dim=8)
    local.upsert(docs)
    remote.upsert(docs)
    now = datetime.now(UTC)
    for text in ("boundary layer flow", "flow flow boundary layer", "What is the flow? Which flow, over which plate?"):
        q = SearchQuery("c", text, mode="bm25", k=10)
        weights = query_weights(text)
        assert max(weights.values()) > 1 or text == "boundary layer flow"  # the repeats are counted
        ours = {h.id: h.score for h in local._bm25(q, now, weights, 10)}
        body = bm25_body(q, now, weights, 10, None)
        theirs = {
            h.id: h.score for h in remote._hits(remote._call(remote._os.search, index=remote._index, body=body), False)
        }
        assert list(ours) == list(theirs) and len(ours) >= 4  # the same documents, in the same order
        for i, score in ours.items():
            assert score == pytest.approx(theirs[i], rel=0.03), (text, i)
        # and the scores users see (search_rules.scored) are the same numbers
        assert [h.score for h in local.search(q, now)] == pytest.approx(
            [h.score for h in remote.search(q, now)], abs=1e-6
        )
