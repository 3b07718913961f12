"""The OpenSearch adapter retries throttled and unreachable requests with backoff (a fake client: the
throttling cannot be provoked on the test node)."""

from __future__ import annotations


def test_opensearch_requests_are_retried_with_backoff_while_throttled() -> None:
    import pytest
    from opensearchpy.exceptions import TransportError

    from engram.adapters.aws.opensearch_index import RETRY_DELAYS, OpenSearchIndex

    class Throttled:
        """Answers 429 `failures` times, then a result (what a busy OpenSearch does)."""

        def __init__(self, failures: int, status: int = 429) -> None:
            self.failures, self.status, self.calls = failures, status, 0

        def count(self, **kw: object) -> dict[str, int]:
            self.calls += 1
            if self.calls <= self.failures:
                raise TransportError(self.status, "throttled", {})
            return {"count": 7}

    slept: list[float] = []
    client = Throttled(2)
    index = OpenSearchIndex(client, "i")
    index._ready = True
    index.sleep = slept.append
    assert index.count("c") == 7 and client.calls == 3 and slept == list(RETRY_DELAYS[:2])
    gives_up = OpenSearchIndex(Throttled(99), "i")
    gives_up._ready, gives_up.sleep = True, slept.append
    with pytest.raises(TransportError):
        gives_up.count("c")
    bad_request = OpenSearchIndex(Throttled(1, status=400), "i")
    bad_request._ready, bad_request.sleep = True, slept.append
    slept.clear()
    with pytest.raises(TransportError):
        bad_request.count("c")
    assert slept == []  # a 400 is not retried


def test_a_throttled_search_inside_msearch_retries_the_request() -> None:
    from datetime import UTC, datetime

    import numpy as np
    import pytest
    from opensearchpy.exceptions import TransportError

    from engram.adapters.aws.opensearch_index import RETRY_DELAYS, OpenSearchIndex
    from engram.kernel.ports import SearchQuery

    class PartlyThrottled:
        """An `_msearch` whose second search is refused `failures` times (429, or the given status)."""

        def __init__(self, failures: int, status: int = 429) -> None:
            self.failures, self.status, self.calls = failures, status, 0

        def msearch(self, index: str, body: list[dict[str, object]]) -> dict[str, object]:
            self.calls += 1
            assert len(body) == 6  # header + search, three times: both lists and the term counts, one request
            ok = {"hits": {"total": {"value": 0}, "hits": []}}
            if self.calls <= self.failures:
                return {"responses": [ok, {"status": self.status, "error": {"type": "rejected"}}, ok]}
            return {"responses": [ok, ok, ok]}

    q = SearchQuery("c", "cat", np.ones(4, dtype=np.float32) / 2, "hybrid", 5)
    slept: list[float] = []
    client = PartlyThrottled(1)
    index = OpenSearchIndex(client, "i", dim=4)
    index._ready, index.sleep = True, slept.append
    assert index.search(q, datetime.now(UTC)) == [] and client.calls == 2 and slept == [RETRY_DELAYS[0]]
    refused = OpenSearchIndex(PartlyThrottled(1, status=400), "i", dim=4)
    refused._ready, refused.sleep = True, slept.append
    with pytest.raises(TransportError) as raised:
        refused.search(q, datetime.now(UTC))
    assert raised.value.status_code == 400 and slept == [RETRY_DELAYS[0]]  # not retried
