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
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from engram.kernel.ports import Vector

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


class Graph:
    """The graph and which slot each of its vectors is."""

    def __init__(self, index: Any, slots: Vector) -> None:
        self.index, self.slots = index, slots
        # its own lock: additions run outside the context's (its writes go on meanwhile); a search, which holds the
        # context's, waits here for at most one step of them; never taken before the context's
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return int(self.slots.shape[0])

    def add(self, slots: Vector, vectors: Vector) -> None:
        """More nodes (a slot's older node stays: candidates are rescored from the slot's current vector)."""
        with self.lock:
            self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            self.slots = np.concatenate([self.slots, slots.astype(np.int64)])

    def candidates(self, qv: Vector, n: int) -> Vector:
        """The slots of (about) the `n` nearest vectors, as the graph saw them."""
        with self.lock:
            _, found = self.index.search(qv.reshape(1, -1).astype(np.float32), min(n, len(self)))
            ids = found[0]
            slots = self.slots[ids[ids >= 0]]
        return np.asarray(slots[slots >= 0], dtype=np.int64)

    def copy(self) -> tuple[Any, Vector]:
        """A copy of the index and its node slots, as they are between two additions (what a segment saves)."""
        import faiss

        with self.lock:
            return faiss.deserialize_index(faiss.serialize_index(self.index)), self.slots.copy()


def build(dim: int, read: Callable[[int], tuple[Any, Vector] | None]) -> Graph:
    """A graph over the chunks `read(start)` returns ((slots, vectors) from slot `start` on; None at the end)."""
    import faiss  # imported when a context first grows this large

    faiss.omp_set_num_threads(THREADS)
    index: Any = faiss.index_factory(dim, f"HNSW32,{ENCODING}", faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 128
    index.hnsw.efSearch = EF_SEARCH
    slots: list[Vector] = []
    waiting: list[Vector] = []  # vectors read before the code is trained: its range per dimension needs TRAIN of them

    def add(vectors: list[Vector], end: bool) -> list[Vector]:
        if not vectors or (not index.is_trained and sum(v.shape[0] for v in vectors) < TRAIN and not end):
            return vectors
        block = np.ascontiguousarray(np.concatenate(vectors), dtype=np.float32)
        if not index.is_trained:
            index.train(block)
        index.add(block)
        return []

    start = 0
    while (chunk := read(start)) is not None:
        chunk_slots, vectors = chunk
        if chunk_slots.shape[0]:
            slots.append(chunk_slots)
            waiting = add([*waiting, vectors], end=False)
        start += CHUNK
    add(waiting, end=True)
    return Graph(index, np.concatenate(slots) if slots else np.zeros(0, dtype=np.int64))


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
