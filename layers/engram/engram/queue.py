"""The Queue port and its in-process adapter: named background jobs with a JSON payload.

Jobs are (name, payload) pairs, never closures, so the same service code runs over a message queue
(SQS on AWS, where a worker function looks the handler up by name). Services register their handlers.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

log = logging.getLogger("engram.queue")
Payload = dict[str, Any]
BLOB_CREATED_JOB = "blob.created"  # a file landed in the blob store (S3 -> EventBridge -> SQS on AWS)
Handler = Callable[[Payload], None]
BatchHandler = Callable[[list[Payload]], None]
BATCH_JOBS = 64  # most jobs of one name a batch handler gets at once


class Queue(Protocol):
    def register(self, name: str, handler: Handler, batch: BatchHandler | None = None) -> None:
        """Handle jobs called `name`. A failing handler must record its own failure; the queue logs it.

        With `batch`, jobs of that name waiting together are handed over at once (up to BATCH_JOBS, in
        submission order), so a handler can share work between them (one embedding call for many
        documents)."""
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
        self._batches: dict[str, BatchHandler] = {}

    def register(self, name: str, handler: Handler, batch: BatchHandler | None = None) -> None:
        self._handlers[name] = handler
        if batch is not None:
            self._batches[name] = batch

    def batches(self, name: str) -> bool:
        return name in self._batches

    def check(self, name: str, payload: Payload) -> None:
        if name not in self._handlers:
            raise KeyError(f"no handler for job {name!r}")
        json.dumps(payload)  # what a message queue could not carry fails here, not in the worker

    def run(self, name: str, payload: Payload) -> None:
        self.run_many(name, [payload])

    def runs(self, names: Sequence[str]) -> list[range]:
        """Consecutive positions of `names` to run together: a run of one batchable name (at most
        BATCH_JOBS), or a single job."""
        out: list[range] = []
        start = 0
        while start < len(names):
            end = start + 1
            while self.batches(names[start]) and end < len(names) and end - start < BATCH_JOBS:
                if names[end] != names[start]:
                    break
                end += 1
            out.append(range(start, end))
            start = end
        return out

    def dispatch(self, name: str, payloads: list[Payload]) -> None:
        """Jobs of one name, in order: together when the name has a batch handler. Raises what they raise."""
        if len(payloads) > 1 and name in self._batches:
            self._batches[name](payloads)
            return
        for payload in payloads:
            self._handlers[name](payload)

    def run_many(self, name: str, payloads: list[Payload]) -> None:
        """`dispatch`, with a failure logged rather than raised."""
        try:
            self.dispatch(name, payloads)
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
        held: tuple[str, Payload] | None = None
        while True:
            name, payload = held if held is not None else self._q.get()
            held, payloads = None, [payload]
            while self.batches(name) and len(payloads) < BATCH_JOBS:  # what waits behind it, same name
                try:
                    following = self._q.get_nowait()
                except queue.Empty:
                    break
                if following[0] != name:
                    held = following
                    break
                payloads.append(following[1])
            try:
                self.run_many(name, payloads)
            finally:
                with self._idle:
                    self._pending -= len(payloads)
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
            run = self.runs([n for n, _ in self.jobs])[0]
            taken, self.jobs = self.jobs[: len(run)], self.jobs[len(run) :]
            self.run_many(taken[0][0], [p for _, p in taken])
        return True
