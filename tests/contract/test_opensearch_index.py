"""The OpenSearch SearchIndex against the same contract suite as the embedded one, on a real node."""

from __future__ import annotations

import uuid

import pytest
from opensearchpy import OpenSearch

from engram.adapters.aws.opensearch_index import OpenSearchIndex
from tests.contract.suites import SearchIndexContract

pytestmark = pytest.mark.opensearch


class TestOpenSearchIndex(SearchIndexContract):
    @pytest.fixture
    def index(self, opensearch: str) -> OpenSearchIndex:
        client = OpenSearch(hosts=[opensearch], timeout=30)
        return OpenSearchIndex(client, f"engram-{uuid.uuid4().hex[:8]}", dim=8)
