"""An approximate nearest-neighbour graph over a large context's vectors (issue #54), for `Slots.cosine`.

faiss's HNSW (32 links a node, its copy of the vectors a byte a dimension) over the vectors a context had when the
graph was built: a query asks it for `CANDIDATES` × the k it wants, and those candidates — with every slot whose
vector changed since the build (`Slots.fresh`) — are scored exactly from the context's own matrix, so a score is
never an approximation: only which rows get scored is. Built in a background thread (a million vectors take minutes
on two cores) reading the matrix in chunks under the context's lock; until it is installed, and for contexts under
`MIN_VECTORS`, search stays exact. Chosen by measurement (bench/RESULTS.md, #54): usearch was dropped because
importing it before onnxruntime kills the process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from engram.kernel.ports import Vector

Array = np.ndarray[Any, np.dtype[Any]]  # slots, keys and (node, slot) pairs

MIN_VECTORS = 20_000  # below this, an exact product is a few milliseconds: no graph
CANDIDATES = 2  # candidates asked of the graph for each result wanted (at least MIN_CANDIDATES)
MIN_CANDIDATES = 256
EF_SEARCH = 256
REBUILD = 1.0  # a graph is built again when it holds this share more nodes than vectors live (stale ones)
ADD = 128  # vectors changed since the build are added to the graph this many at a time (under the graph's lock)
CHUNK = 8192
ENCODING = "SQ8"  # the graph's own copy of the vectors: a byte a dimension (only which rows are rescored depends on it)
TRAIN = 4096  # vectors the 8-bit code's range is learnt from
NICE = 19  # a build runs on what the queries leave: at 1M it took over 11 min on one core beside them (#54)
PAUSE = 0.002  # between two steps of additions
THREADS = 1  # a build leaves the other cores to the queries it runs beside
GRAIN = 512  # vectors whose components round to the same multiple of 1/GRAIN are one node of the graph
RECENT = 8192  # keys of nodes added since the last sort, looked up in a dict; then sorted in with the rest


class Graph:
    """The graph, which slot each of its nodes is, and the slots whose vector is a node's (twins).

    Vectors that are the same (to `GRAIN`) are one node: hundreds of copies of one vector — a fact restated and
    superseded again and again, a boilerplate chunk in every file — made a clique the search could not leave (#54:
    at 1M, queries near one found 84 nodes for 300 asked, none current, and fell back to the exact product). A node's
    twins are returned with it; each is scored from its own current vector, like every candidate."""

    def __init__(self, index: Any, slots: Array, keys: Array, twins: Array | None = None) -> None:
        self.index, self.slots = index, slots
        order = np.argsort(keys, kind="stable")
        self._keys, self._key_nodes = keys[order], order.astype(np.int64)  # sorted: a vector's node, by its key
        self._recent: dict[int, int] = {}  # keys of nodes added since the last sort
        pairs = np.zeros((2, 0), dtype=np.int64) if twins is None else twins.astype(np.int64)
        self._twins = pairs[:, np.argsort(pairs[0], kind="stable")]
        self._more: list[Array] = []  # twins added since they were last sorted
        # its own lock: additions run outside the context's (its writes go on meanwhile); a search, which holds the
        # context's, waits here for at most one step of them; never taken before the context's
        self.lock = threading.Lock()

    def __len__(self) -> int:
        """Its nodes and twins: each slot it has seen, stale ones included (a rebuild drops those)."""
        return int(self.slots.shape[0] + self._twins.shape[1] + sum(t.shape[1] for t in self._more))

    @property
    def nodes(self) -> int:
        return int(self.slots.shape[0])

    def add(self, slots: Array, vectors: Vector) -> None:
        """More slots: a vector no node has becomes one, the others twins of theirs (a slot's older node or twin
        stays: candidates are rescored from the slot's current vector)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        slots = slots.astype(np.int64)
        keys = keys_of(vectors)
        with self.lock:
            uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
            node = self._find(uniq)
            new = np.flatnonzero(node < 0)
            if new.shape[0]:
                self.index.add(vectors[first[new]])
                node[new] = self.nodes + np.arange(new.shape[0])
                self.slots = np.concatenate([self.slots, slots[first[new]]])
                self._recent.update(zip(uniq[new].tolist(), node[new].tolist(), strict=True))
                if len(self._recent) > RECENT:
                    self._sort_keys()
            twin = np.ones(slots.shape[0], dtype=bool)
            twin[first[new]] = False
            if twin.any():
                self._more.append(np.stack([node[inverse.reshape(-1)[twin]], slots[twin]]))

    def candidates(self, qv: Vector, n: int) -> Array:
        """The slots of (about) the `n` nearest vectors, as the graph saw them, with their twins."""
        with self.lock:
            _, found = self.index.search(qv.reshape(1, -1).astype(np.float32), min(n, self.nodes))
            ids = found[0]
            ids = ids[ids >= 0]
            twins = self._twins_of(ids)
            slots = np.concatenate([self.slots[ids], twins])
        return np.asarray(slots[slots >= 0], dtype=np.int64)

    def copy(self) -> tuple[Any, Array, Array, Array]:
        """A copy of the index, its node slots, each node's key and the twins (node, slot), as they are between two
        additions (what a segment saves)."""
        import faiss

        with self.lock:
            self._sort_keys()
            keys = np.empty(self.nodes, dtype=np.uint64)
            keys[self._key_nodes] = self._keys
            return (
                faiss.clone_index(self.index),  # one copy (through its serialisation: two, ~700 MB each at 1M)
                self.slots.copy(),
                keys,
                self._all_twins().copy(),
            )

    def _find(self, keys: Array) -> Array:
        """The node whose vector has each key, -1 for none."""
        out = np.full(keys.shape[0], -1, dtype=np.int64)
        if self._keys.shape[0]:
            at = np.minimum(np.searchsorted(self._keys, keys), self._keys.shape[0] - 1)
            hit = self._keys[at] == keys
            out[hit] = self._key_nodes[at[hit]]
        if self._recent:
            for i in np.flatnonzero(out < 0).tolist():
                out[i] = self._recent.get(int(keys[i]), -1)
        return out

    def _sort_keys(self) -> None:
        if self._recent:
            keys = np.concatenate([self._keys, np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))])
            nodes = np.concatenate([self._key_nodes, np.fromiter(self._recent.values(), np.int64, len(self._recent))])
            order = np.argsort(keys, kind="stable")
            self._keys, self._key_nodes, self._recent = keys[order], nodes[order], {}

    def _all_twins(self) -> Array:
        if self._more:
            pairs = np.concatenate([self._twins, *self._more], axis=1)
            self._twins, self._more = pairs[:, np.argsort(pairs[0], kind="stable")], []
        return self._twins

    def _twins_of(self, ids: Array) -> Array:
        twins = self._all_twins()
        if not twins.shape[1] or not ids.shape[0]:
            return np.zeros(0, dtype=np.int64)
        lo, hi = np.searchsorted(twins[0], ids, "left"), np.searchsorted(twins[0], ids, "right")
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            return np.zeros(0, dtype=np.int64)
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        return np.asarray(twins[1][starts + np.arange(total)], dtype=np.int64)


def keys_of(vectors: Vector) -> Array:
    """Each vector's key: a 64-bit digest of it rounded to `GRAIN` (vectors the same to that are one node)."""
    rounded = np.ascontiguousarray(np.rint(vectors * GRAIN).astype(np.int16))
    digest = hashlib.blake2b
    return np.fromiter(
        (int.from_bytes(digest(row.tobytes(), digest_size=8).digest(), "little") for row in rounded),
        dtype=np.uint64,
        count=rounded.shape[0],
    )


def build(dim: int, read: Callable[[int], tuple[Any, Vector] | None]) -> Graph:
    """A graph over the chunks `read(start)` returns ((slots, vectors) from slot `start` on; None at the end)."""
    import faiss  # imported when a context first grows this large

    faiss.omp_set_num_threads(THREADS)
    index: Any = faiss.index_factory(dim, f"HNSW32,{ENCODING}", faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 128
    index.hnsw.efSearch = EF_SEARCH
    graph = Graph(index, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64))
    waiting: list[tuple[Vector, Vector]] = []  # read before the code is trained: its range per dimension needs TRAIN

    def add(end: bool) -> None:
        if not waiting or (not index.is_trained and sum(v.shape[0] for _, v in waiting) < TRAIN and not end):
            return
        if not index.is_trained:
            index.train(np.ascontiguousarray(np.concatenate([v for _, v in waiting]), dtype=np.float32))
        for slots, vectors in waiting:
            graph.add(slots, vectors)
        waiting.clear()

    start = 0
    while (chunk := read(start)) is not None:
        if chunk[0].shape[0]:
            waiting.append(chunk)
            add(end=False)
        start += CHUNK
    add(end=True)
    return graph


def build_in_background(
    dim: int,
    lock: AbstractContextManager[Any],
    read: Callable[[int], tuple[Any, Vector] | None],
    install: Callable[[Graph], None],
    stop: Callable[[], bool] = lambda: False,
) -> threading.Thread:
    """Build a graph in a daemon thread: each chunk read under `lock`, the graph installed under it. Once `stop()`
    (the process is ending) no chunk is read and the graph, cut short, is never installed."""

    def locked_read(start: int) -> tuple[Any, Vector] | None:
        with lock:
            return None if stop() else read(start)

    def work() -> None:
        with contextlib.suppress(AttributeError, OSError):  # Linux: a thread's own niceness (elsewhere: as is)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        graph = build(dim, locked_read)
        with lock:
            if not stop():
                install(graph)

    thread = threading.Thread(target=work, name="engram-ann", daemon=True)
    thread.start()
    return thread


def add_in_background(
    lock: AbstractContextManager[Any],
    take: Callable[[], tuple[Graph, Vector, Vector] | None],
    added: Callable[[Vector], bool],
) -> threading.Thread:
    """Add the changed vectors to a graph, `ADD` at a time, in a daemon thread at the lowest priority: each batch
    taken (`take`) and marked done (`added`) under the context's `lock`, added to the graph outside it (under the
    graph's own), so the context's writes never wait on the graph and a search waits at most one step."""

    def work() -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        while True:
            with lock:
                job = take()
            if job is None:
                return
            graph, slots, vectors = job
            graph.add(slots, vectors)
            with lock:
                if added(slots):
                    return
            time.sleep(PAUSE)  # a writer or search waiting for the lock takes it now (a lock is not fair)

    thread = threading.Thread(target=work, name="engram-ann-add", daemon=True)
    thread.start()
    return thread
