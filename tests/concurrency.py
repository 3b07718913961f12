"""Many writers at once, for the tests of every write path (DESIGN §9)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def together(n: int, work: Callable[[int], object]) -> list[BaseException]:
    """Run `work(0)` … `work(n - 1)` on `n` threads released at the same moment; the errors they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def one(i: int) -> None:
        try:
            start.wait()
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
