"""Real engines for the adapter contract suites, each started once per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.aws import aws_endpoint
from tests.opensearch import opensearch_node


@pytest.fixture(scope="session")
def endpoint() -> Iterator[str]:
    """A local AWS API emulator (moto server), or AWS_ENDPOINT_URL."""
    with aws_endpoint() as url:
        yield url


@pytest.fixture(scope="session")
def opensearch() -> Iterator[str]:
    """A single-node OpenSearch 2.19.1 with k-NN, or OPENSEARCH_URL."""
    with opensearch_node() as url:
        yield url
