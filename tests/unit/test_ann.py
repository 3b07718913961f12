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


def test_copies_of_one_vector_are_one_node_and_every_copy_is_found(index: SqliteSearchIndex) -> None:
    """Hundreds of copies of one vector (a fact restated again and again, a boilerplate chunk) are one node of the
    graph with the rest as its twins: a clique of copies trapped the graph's search at 1M (#54). A query at the
    copies still gets every copy, the nearest others after them, and copies written after the build join the node."""
    vectors = clustered(N, 11)
    copy = vectors[7]
    index.upsert([doc(i, v) for i, v in enumerate(vectors)] + [doc(N + i, copy) for i in range(300)])
    search(index, copy)
    settle(index)
    graph = index._contexts["c"].graph
    assert graph is not None and graph.nodes == N and len(graph) == N + 300
    copies = {"d7", *(f"d{N + i}" for i in range(300))}
    got = search(index, copy, 310)
    assert set(got[:301]) == copies
    assert got[301:] == [d for d in exact(vectors, copy, 11) if d != "d7"][:9]
    index.upsert([doc(N + 300 + i, copy) for i in range(50)])  # after the build: twins of the same node
    index.delete("c", ["d7", f"d{N}"])
    search(index, copy)
    settle(index)
    assert graph.nodes == N and len(graph) == N + 350
    got = search(index, copy, 360)
    assert set(got[:349]) == (copies | {f"d{N + 300 + i}" for i in range(50)}) - {"d7", f"d{N}"}


def test_a_graph_node_and_its_twins_come_back_together() -> None:
    """`Graph` alone: copies (to the grain) within one addition and across additions are twins of the first;
    a vector a grain away is a node of its own."""
    import faiss

    vectors = np.rint(clustered(200, 12) * ann.GRAIN) / ann.GRAIN  # on the grain: +0.2 of one rounds back
    index = faiss.IndexHNSWFlat(64, 8, faiss.METRIC_INNER_PRODUCT)
    graph = ann.Graph(index, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64))
    block = np.concatenate([vectors, vectors[:5], vectors[:5] + 0.2 / ann.GRAIN])  # same, and same to the grain
    graph.add(np.arange(210, dtype=np.int64), block)
    moved = vectors[9:10] + 3.0 / ann.GRAIN
    graph.add(np.array([500, 501]), np.concatenate([vectors[3:4], moved]))
    assert graph.nodes == 201 and len(graph) == 212
    found = set(graph.candidates(vectors[3], 1).tolist())
    assert found == {3, 203, 208, 500}
    assert 501 in set(graph.candidates(moved[0], 1).tolist()) | set(graph.candidates(moved[0], 2).tolist())
    _, node_slots, keys, twins = graph.copy()
    again = ann.Graph(index, node_slots, keys, twins)
    assert set(again.candidates(vectors[3], 1).tolist()) == found and len(again) == 212
    again.add(np.array([600]), vectors[3:4])
    assert again.nodes == 201 and 600 in set(again.candidates(vectors[3], 1).tolist())
