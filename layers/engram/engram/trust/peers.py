"""What the other workers of `engram serve --workers N` run, for the fair share of the machine (`engram.trust.fair`,
#54). Each worker shares its own slots; without this, a noisy context's calls on the worker a quiet context is not on
ran unchecked and took the cores from it (the quiet recall 1.84-2.17x its time alone with two workers).

The supervisor makes one table in shared memory (a `multiprocessing` RawArray) and gives each worker its row. By
context bucket a worker's row holds its calls running, its calls waiting, and when its last call ended; a worker
writes only its own row (on its event loop's thread: one writer, no lock) and reads the others', which may be a
moment old — a share decided on a count a call behind is still a share. A bucket is the context's CRC-32 (the
interpreter's `hash` differs between processes) over `BUCKETS`: two contexts in one bucket share one share (about one
pair in a thousand). `time.monotonic` is the machine's clock on Linux, the one system where workers get a table.

Written here rather than taken from a library: the table is a few counters in a RawArray read through numpy; what
would share them otherwise (a manager process, a database) costs a round trip on every call."""

from __future__ import annotations

import zlib
from typing import Any

BUCKETS = 1024
RUNNING, WAITING, ENDED = 0, 1, 2
_FIELDS = 3

_joined: list[Peers | None] = [None]


def table(workers: int) -> Any:
    """The shared table for `workers` workers (made by the supervisor before it starts them)."""
    import multiprocessing

    return multiprocessing.get_context("spawn").RawArray("d", workers * _FIELDS * BUCKETS)


def clear(shared: Any, index: int) -> None:
    """Worker `index`'s row emptied (it ended: its calls run no more)."""
    import numpy as np

    np.frombuffer(shared, dtype=np.float64).reshape(-1, _FIELDS, BUCKETS)[index] = 0.0


def join(shared: Any, index: int) -> None:
    """This process is worker `index` of the table: the fair share built after this reads its peers, and the encoder
    spreads a pass over the cores only while no other worker runs a call (`engram.kernel.load.alone`)."""
    from engram.kernel import load

    _joined[0] = peers = Peers(shared, index)
    load.beside(peers.running_elsewhere)


def leave() -> None:
    """This process is no worker of a table (again)."""
    from engram.kernel import load

    _joined[0] = None
    load.beside(None)


def joined() -> Peers | None:
    """This process's peers (None unless it is one of `engram serve --workers`'s)."""
    return _joined[0]


def bucket(key: str) -> int:
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % BUCKETS


class Peers:
    def __init__(self, shared: Any, index: int) -> None:
        import numpy as np  # here: a process with no peers (a Lambda function's authorizer) never loads it

        self._np = np
        rows = np.frombuffer(shared, dtype=np.float64).reshape(-1, _FIELDS, BUCKETS)
        self.mine = rows[index]
        self.others = [rows[i] for i in range(rows.shape[0]) if i != index]

    def add(self, key: str, field: int, delta: int) -> None:
        """This worker's count of `key`'s calls running or waiting moved by `delta`."""
        self.mine[field, bucket(key)] += delta

    def ended(self, key: str, at: float) -> None:
        self.mine[ENDED, bucket(key)] = at

    def running(self, key: str) -> int:
        """`key`'s calls running on the other workers."""
        b = bucket(key)
        return int(sum(row[RUNNING, b] for row in self.others))

    def running_elsewhere(self) -> bool:
        """Whether another worker runs a call of any context."""
        return any(bool(row[RUNNING].any()) for row in self.others)

    def busy(self, key: str) -> bool:
        """Whether `key` has calls running or waiting on another worker."""
        b = bucket(key)
        return any(row[RUNNING, b] > 0 or row[WAITING, b] > 0 for row in self.others)

    def sharing(self, now: float, recent: float) -> set[int]:
        """The buckets of contexts with calls running or waiting on another worker, or one ended within `recent`."""
        out: set[int] = set()
        for row in self.others:
            live = (row[RUNNING] > 0) | (row[WAITING] > 0) | (now - row[ENDED] < recent)
            out.update(self._np.flatnonzero(live).tolist())
        return out
