"""The local index's approximate graph (`engram.adapters.local.ann`, issue #54): built in the background once a
context is large, its candidates rescored exactly; what changed since it was built still found; filters kept."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from engram.adapters.local import ann
from engram.adapters.local.sqlite_search import SqliteSearchIndex
from engram.kernel.ports import IndexDoc, SearchQuery

N = 3000
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit vectors around 40 centres: neighbourhoods like real embeddings' (random ones have none)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, 64)).astype(np.float32)
    v = centres[rng.integers(0, 40, n)] + 0.6 * rng.standard_normal((n, 64)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def doc(i: int, v: np.ndarray, scope: str = "org/a") -> IndexDoc:
    return IndexDoc("c", "turn", f"d{i}", f"text {i}", v, [scope], None, None, {})


def exact(vectors: np.ndarray, q: np.ndarray, k: int) -> list[str]:
    return [f"d{i}" for i in np.argsort(-(vectors @ q), kind="stable")[:k]]


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SqliteSearchIndex:
    monkeypatch.setattr(ann, "MIN_VECTORS", 1000)
    return SqliteSearchIndex(tmp_path / "search.db")


def search(index: SqliteSearchIndex, q: np.ndarray, k: int = 10, scopes: list[list[str]] | None = None) -> list[str]:
    query = SearchQuery("c", "", q, mode="vector", k=k, visibility=scopes or [["org"]])
    return [h.id for h in index.search(query, NOW)]


def settle(index: SqliteSearchIndex) -> None:
    for t in index.graphs:
        t.join(60)


def test_a_large_context_gets_a_graph_whose_results_match_exact_search(index: SqliteSearchIndex) -> None:
    vectors = clustered(N, 1)
    index.upsert([doc(i, v) for i, v in enumerate(vectors)])
    queries = clustered(100, 2)
    search(index, queries[0])  # the first search starts the build
    settle(index)
    assert index._contexts["c"].graph is not None and len(index._contexts["c"].graph) == N
    hits = [len(set(search(index, q)) & set(exact(vectors, q, 10))) / 10 for q in queries]
    assert np.mean(hits) >= 0.99


def test_writes_after_the_build_are_found_and_deleted_ones_never(index: SqliteSearchIndex) -> None:
    vectors = clustered(N, 3)
    index.upsert([doc(i, v) for i, v in enumerate(vectors)])
    q = clustered(1, 4)[0]
    search(index, q)
    settle(index)
    best = search(index, q, 5)
    index.delete("c", best[:2])
    index.upsert([doc(N, q)])  # the query's own vector, written after the graph
    got = search(index, q, 5)
    assert got[0] == f"d{N}" and not set(best[:2]) & set(got)
    assert set(got[1:]) == set(best[2:5]) | (set(got[1:]) - set(best))  # the rest still the nearest left


def test_a_selective_filter_still_finds_its_few(index: SqliteSearchIndex) -> None:
    vectors = clustered(N, 5)
    index.upsert([doc(i, v, "org/b" if i % 100 == 0 else "org/a") for i, v in enumerate(vectors)])
    q = clustered(1, 6)[0]
    search(index, q)
    settle(index)
    mine = np.arange(0, N, 100)
    want = [f"d{mine[j]}" for j in np.argsort(-(vectors[mine] @ q), kind="stable")[:10]]
    assert search(index, q, 10, [["org/b"]]) == want


def test_a_small_context_stays_exact(tmp_path: Path) -> None:
    index = SqliteSearchIndex(tmp_path / "search.db")
    vectors = clustered(500, 7)
    index.upsert([doc(i, v) for i, v in enumerate(vectors)])
    q = clustered(1, 8)[0]
    assert search(index, q) == exact(vectors, q, 10)
    assert not index.graphs and index._contexts["c"].graph is None
