"""The Queue port and its in-process adapter: background jobs (embedding after ingest)."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("engram.queue")
Job = Callable[[], None]


class Queue(Protocol):
    def submit(self, job: Job) -> None:
        """Run `job` later. A failing job must record its own failure; the queue only logs it."""
        ...

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job has run. Returns False on timeout."""
        ...


class ThreadQueue:
    """One daemon worker thread, jobs in submission order."""

    def __init__(self) -> None:
        self._q: queue.Queue[Job] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        threading.Thread(target=self._work, name="engram-worker", daemon=True).start()

    def submit(self, job: Job) -> None:
        with self._idle:
            self._pending += 1
        self._q.put(job)

    def _work(self) -> None:
        while True:
            job = self._q.get()
            try:
                job()
            except Exception:
                log.exception("background job failed")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


class InlineQueue:
    """Runs each job at once (tests, CLI)."""

    def submit(self, job: Job) -> None:
        job()

    def join(self, timeout: float | None = None) -> bool:
        return True
