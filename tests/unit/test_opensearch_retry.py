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
