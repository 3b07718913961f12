"""Read-modify-write against a version check: do it again when another writer came between."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from engram.kernel.errors import Conflict

T = TypeVar("T")
ATTEMPTS = 200  # concurrent writers of one record land one at a time; each retry waits a little


def on_conflict(work: Callable[[], T], attempts: int = ATTEMPTS, sleep: Callable[[float], None] = time.sleep) -> T:
    """`work()` (a read, then a write expecting the version read), again after a short jittered wait
    whenever its write meets a version conflict; the last attempt's conflict is the caller's. Any other
    conflict (`in_use`, `external_id_conflict`, ...) is an answer, not a race: it is the caller's at once."""
    for attempt in range(attempts - 1):
        try:
            return work()
        except Conflict as exc:
            if exc.code != "version_conflict":
                raise
            sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
    return work()
