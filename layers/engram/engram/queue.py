"""The Queue port and its in-process adapter: named background jobs with a JSON payload.

Jobs are (name, payload) pairs, never closures, so the same service code runs over a message queue
(SQS on AWS, where a worker function looks the handler up by name). Services register their handlers.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("engram.queue")
Payload = dict[str, Any]
BLOB_CREATED_JOB = "blob.created"  # a file landed in the blob store (S3 -> EventBridge -> SQS on AWS)
Handler = Callable[[Payload], None]


class Queue(Protocol):
    def register(self, name: str, handler: Handler) -> None:
        """Handle jobs called `name`. A failing handler must record its own failure; the queue logs it."""
        ...

    def submit(self, name: str, payload: Payload) -> None:
        """Run the handler of `name` later with `payload` (JSON-serialisable)."""
        ...

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job has run. Returns False on timeout."""
        ...


class Handlers:
    """The registry every adapter shares: name -> handler, payload checked at submit time."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, name: str, handler: Handler) -> None:
        self._handlers[name] = handler

    def check(self, name: str, payload: Payload) -> None:
        if name not in self._handlers:
            raise KeyError(f"no handler for job {name!r}")
        json.dumps(payload)  # what a message queue could not carry fails here, not in the worker

    def run(self, name: str, payload: Payload) -> None:
        try:
            self._handlers[name](payload)
        except Exception:
            log.exception("background job %s failed", name)


class ThreadQueue(Handlers):
    """One daemon worker thread, jobs in submission order."""

    def __init__(self) -> None:
        super().__init__()
        self._q: queue.Queue[tuple[str, Payload]] = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        threading.Thread(target=self._work, name="engram-worker", daemon=True).start()

    def submit(self, name: str, payload: Payload) -> None:
        self.check(name, payload)
        with self._idle:
            self._pending += 1
        self._q.put((name, payload))

    def _work(self) -> None:
        while True:
            name, payload = self._q.get()
            try:
                self.run(name, payload)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


class ManualQueue(Handlers):
    """Holds jobs until `join` runs them (tests that look at the state in between)."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[tuple[str, Payload]] = []

    def submit(self, name: str, payload: Payload) -> None:
        self.check(name, payload)
        self.jobs.append((name, payload))

    def join(self, timeout: float | None = None) -> bool:
        while self.jobs:
            self.run(*self.jobs.pop(0))
        return True
