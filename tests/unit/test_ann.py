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


def test_a_build_under_way_at_exit_stops_and_is_waited_for(index: SqliteSearchIndex, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`close` (the process's exit) while a graph is being built: no further chunk is read, the graph cut short is
    never installed, and close returns only once the build's thread is done — none is left inside faiss as the
    interpreter ends (a kept 100k-memory folder crashed at exit that way)."""
    import time

    from engram.adapters.local.slots import Slots

    monkeypatch.setattr(ann, "CHUNK", 256)
    index.upsert([doc(i, v) for i, v in enumerate(clustered(N, 9))])
    reads: list[int] = []
    real = Slots.chunk

    def chunk(self: Slots, start: int) -> object:
        reads.append(start)
        deadline = time.monotonic() + 10
        while not index._closing and time.monotonic() < deadline:  # the first chunk is read as the exit begins
            time.sleep(0.01)
        return real(self, start)

    monkeypatch.setattr(Slots, "chunk", chunk)
    search(index, clustered(1, 10)[0])  # starts the build
    assert index.graphs and index.graphs[0].is_alive()
    deadline = time.monotonic() + 10
    while not reads and time.monotonic() < deadline:
        time.sleep(0.01)
    index.close()
    assert not any(t.is_alive() for t in index.graphs)
    assert reads == [0] and index._contexts["c"].graph is None
