"""How many calls this process runs now (#54): the server's slots count them (`engram.trust.fair.FairShare`), and
the local encoder spreads one pass over several threads only while a call runs alone. Beside other calls every core
already has work: threads that spin between the encoder's operators take it from them (at 32 clients, 59.8 calls/s
with the spreading against 77.3 without; alone, a query's pass is ~1.5 ms faster spread over two)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_running = [0]  # changed on the event loop's thread only (FairShare); read anywhere (an int: no lock needed)


def started() -> None:
    _running[0] += 1


def ended() -> None:
    _running[0] -= 1


_elsewhere: list[Callable[[], bool]] = []  # whether the machine's other server processes run calls now


def alone() -> bool:
    """Whether this process runs at most one call now (none: a command, a test, a Lambda function's one call) and
    no other worker of `engram serve --workers` runs one: each spreading its passes beside the other's would put
    four spinning threads on two cores."""
    return _running[0] <= 1 and not (_elsewhere and _elsewhere[0]())


def beside(busy: Callable[[], bool] | None) -> None:
    """`busy` says whether the other server processes of the machine run calls (`engram.trust.peers`; None: none)."""
    _elsewhere[:] = [] if busy is None else [busy]


_way: ContextVar[Callable[[], None] | None] = ContextVar("engram_give_way", default=None)


def give_way() -> None:
    """A point in a read where it holds no lock and may wait while another context's call runs: the server's fair
    share (`engram.trust.fair`) says whether this call's should (a no-op outside a served call)."""
    wait = _way.get()
    if wait is not None:
        wait()


@contextmanager
def giving_way(wait: Callable[[], None]) -> Iterator[None]:
    """Within the body (one call's work, on its thread), `give_way` calls `wait`."""
    token = _way.set(wait)
    try:
        yield
    finally:
        _way.reset(token)


def usable_cpus() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
