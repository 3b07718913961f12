"""The Queue port and its store-backed adapter: named background jobs with a JSON payload.

Jobs are (name, payload) pairs, never closures, so the same service code runs over a message queue
(SQS on AWS, where a worker function looks the handler up by name). Services register their handlers.

Durability: a job is a record (`job` items in the `_jobs` context of the RecordStore) written in the
same transaction as the write that needs it (`Queue.job`), so work is acknowledged only with the job
that finishes it. `StoreQueue` runs them from the store: a worker claims a job with a lease (a
version-checked write), runs it, and deletes it; a job whose worker died (kill -9, a closed laptop) is
claimed again when its lease runs out, or at once when its owner is a dead process on this machine. A
failing job is retried with backoff and, after `MAX_ATTEMPTS`, kept as `failed` with its error.
Every process on one data folder runs the jobs any of them queued.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, Protocol

from engram.kernel.clock import Clock, SystemClock, iso, parse_time
from engram.kernel.errors import Conflict, EngramError
from engram.kernel.ports import Item, RecordStore, Write, scan

log = logging.getLogger("engram.kernel.queue")
Payload = dict[str, Any]
BLOB_CREATED_JOB = "blob.created"  # a file landed in the blob store (S3 -> EventBridge -> SQS on AWS)
Handler = Callable[[Payload], None]
BatchHandler = Callable[[list[Payload]], None]
BATCH_JOBS = 64  # most jobs of one name a batch handler gets at once
JOBS = "_jobs"  # the context job records live in; no key can be issued for it (not a valid context id)
LEASE = timedelta(seconds=60)  # a claimed job is another worker's again after this, unless renewed
RENEW_EVERY = 15.0  # seconds: a running batch renews its leases this often
POLL = 1.0  # seconds: how often an idle worker looks for jobs other processes queued
MAX_ATTEMPTS = 5
HAND_OVER: ContextVar[float | None] = ContextVar("engram_hand_over", default=None)
"""The monotonic time after which a long job hands the rest of its work over to a job of its own (it saves what
it did, queues its continuation and returns): set by a runner with a time limit (the Lambda worker, whose
function is stopped at its timeout); none on a local queue, whose leases are renewed while a job runs."""


def past_hand_over() -> bool:
    at = HAND_OVER.get()
    return at is not None and time.monotonic() >= at


class Queue(Protocol):
    def register(self, name: str, handler: Handler, batch: BatchHandler | None = None, passable: bool = False) -> None:
        """Handle jobs called `name`. A failing handler should record its own failure; the queue retries it
        and finally keeps it as failed.

        With `batch`, jobs of that name waiting together are handed over at once (up to BATCH_JOBS, in
        submission order), so a handler can share work between them (one embedding call for many
        documents). With `passable`, a batch of another name may gather its jobs from behind these (they
        commute with any other job: each write's graph job sits between its embedding job and the next
        write's, and would otherwise cut every batch to one document)."""
        ...

    def job(self, name: str, payload: Payload, now: datetime, delay: timedelta | None = None) -> Write:
        """The durable record of a job, to commit in the same transaction as the write that needs it; then
        `started` with it. With `delay`, a safety net: not run before then, and withdrawn with `done` when
        the writer did the work itself."""
        ...

    def done(self, job: Write) -> None:
        """The job's work is done (by its writer): withdraw it."""
        ...

    def started(self, jobs: Sequence[Write]) -> None:
        """The jobs' records are committed: run them (soon, in the background)."""
        ...

    def submit(self, name: str, payload: Payload) -> None:
        """A job on its own: its record committed alone, then started."""
        ...

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every queued job has run (or failed for good). Returns False on timeout."""
        ...

    def dispatch(self, name: str, payloads: list[Payload]) -> None:
        """Run jobs of one name here and now, not queued (together when the name has a batch handler)."""
        ...


class Handlers:
    """The registry every adapter shares: name -> handler, payload checked at submit time."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._batches: dict[str, BatchHandler] = {}
        self._passable: set[str] = set()

    def register(self, name: str, handler: Handler, batch: BatchHandler | None = None, passable: bool = False) -> None:
        self._handlers[name] = handler
        if batch is not None:
            self._batches[name] = batch
        if passable:
            self._passable.add(name)

    def batches(self, name: str) -> bool:
        return name in self._batches

    def check(self, name: str, payload: Payload) -> None:
        if name not in self._handlers:
            raise KeyError(f"no handler for job {name!r}")
        json.dumps(payload)  # what a message queue could not carry fails here, not in the worker

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


_ids = threading.Lock()
_last_id = [0]


def job_id() -> str:
    """Ids sort in submission order within a process (nanoseconds, made strictly increasing), and by
    time across processes."""
    import time

    with _ids:
        stamp = max(time.time_ns(), _last_id[0] + 1)
        _last_id[0] = stamp
    return f"job:{stamp:020d}:{os.getpid()}"


def job_write(
    name: str, payload: Payload, now: datetime, delay: timedelta | None = None, actor: str = "queue"
) -> Write:
    due = now + delay if delay is not None else now
    data = {"name": name, "payload": payload, "attempts": 0, "due": iso(due), "status": "pending"}
    data |= {"owner": None, "lease_until": None, "error": None, "queued_at": iso(now)}
    return Write(JOBS, "job", job_id(), data, actor, expected_version=0)


def this_process() -> str:
    """A lease's owner: this machine and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def alive(owner: str | None) -> bool:
    """Whether a lease's owner may still be running: a dead process on this machine is not."""
    if not owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's: only its lease tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StoreQueue(Handlers):
    """Jobs run from the record store by a worker thread (`worker=False`: only by `join`, for tests that
    look at the state in between)."""

    def __init__(self, records: RecordStore, clock: Clock | None = None, worker: bool = True) -> None:
        super().__init__()
        self.records, self.clock = records, clock or SystemClock()
        self.owner = this_process()
        self._wake = threading.Event()
        self._busy = threading.Lock()  # one batch at a time in this process (the worker or a join)
        self._worker = worker
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if worker:
            args = (weakref.ref(self), self._wake, self._stop)
            self._thread = threading.Thread(target=_work, args=args, name="engram-worker", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End this queue's worker, once the jobs it runs are done: an engine that is finished with (a bench's filler,
        a test's) leaves the store's jobs to the next one, rather than taking them until a collection ends it. Jobs
        still pending stay in the store; from now on `join` runs them in its caller's thread."""
        self._worker = False
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- submitting -----------------------------------------------------------------------

    def job(self, name: str, payload: Payload, now: datetime, delay: timedelta | None = None) -> Write:
        self.check(name, payload)
        return job_write(name, payload, now, delay)

    def started(self, jobs: Sequence[Write]) -> None:
        if jobs:
            self._wake.set()

    def done(self, job: Write) -> None:
        self.records.purge(JOBS, "job", job.id)

    def submit(self, name: str, payload: Payload) -> None:
        now = self.clock.now()
        write = self.job(name, payload, now)
        self.records.transact([write], now)
        self.started([write])

    # -- running --------------------------------------------------------------------------

    def pending(self) -> list[Item]:
        """Jobs not finished (failed ones excluded), in submission order."""
        return [i for i in scan(self.records, JOBS, "job") if i.data["status"] != "failed"]

    def busy(self) -> bool:
        """Whether any job is not finished, read a page of 16 at a time up to the first such job (a join polls
        this every 20 ms; reading all of 1,400 queued jobs each time took half a core from the worker)."""
        return any(i.data["status"] != "failed" for i in scan(self.records, JOBS, "job", page_size=16))

    def failed(self) -> list[Item]:
        return [i for i in scan(self.records, JOBS, "job") if i.data["status"] == "failed"]

    def _claimable(self, item: Item, now: datetime) -> bool:
        d = item.data
        if d["status"] == "failed":
            return False
        due = parse_time(d["due"])
        if due is not None and due > now:
            return False
        if d["status"] == "leased":
            until = parse_time(d["lease_until"])
            return (until is not None and until <= now) or not alive(d["owner"])
        return True

    def _claim(self) -> tuple[str, list[Item]] | None:
        """The first claimable job, and the claimable ones of the same name right behind it (a batch), passing
        over jobs of passable names."""
        now = self.clock.now()
        name: str | None = None
        claimed: list[Item] = []
        for item in scan(self.records, JOBS, "job", page_size=BATCH_JOBS * 2):
            if not self._claimable(item, now):
                continue
            if name is None:
                name = item.data["name"]
            elif not self.batches(name) or len(claimed) >= BATCH_JOBS:
                break
            elif item.data["name"] != name:
                if item.data["name"] in self._passable:
                    continue  # left for the next claim, in its order among its own name
                break
            if item.data["name"] not in self._handlers:
                continue  # another process's job (a handler this one lacks)
            data = dict(item.data, status="leased", owner=self.owner, lease_until=iso(now + LEASE))
            data["attempts"] = int(item.data["attempts"]) + 1
            try:
                claimed += self.records.transact([Write(JOBS, "job", item.id, data, "queue", item.version)], now)
            except Conflict:
                continue  # another worker took it
            if not self.batches(name):
                break
        return (name, claimed) if name is not None and claimed else None

    def _renew(self, items: list[Item], done: threading.Event) -> None:
        held = {i.id: i for i in items}
        while not done.wait(RENEW_EVERY):
            now = self.clock.now()
            for id_, item in list(held.items()):
                data = dict(item.data, lease_until=iso(now + LEASE))
                try:
                    held[id_] = self.records.transact([Write(JOBS, "job", id_, data, "queue", item.version)], now)[0]
                except Conflict:
                    held.pop(id_)  # lost: another worker took it after the lease ran out

    def run_once(self) -> bool:
        """Claim and run one batch. Returns whether there was one."""
        with self._busy:
            got = self._claim()
            if got is None:
                return False
            name, items = got
            done = threading.Event()
            renewer = threading.Thread(target=self._renew, args=(items, done), daemon=True)
            renewer.start()
            try:
                self.dispatch(name, [i.data["payload"] for i in items])
                error: Exception | None = None
            except Exception as exc:
                error = exc
                log.exception("background job %s failed", name)
            finally:
                done.set()
                renewer.join()
            for item in items:
                if error is None:
                    self.records.purge(JOBS, "job", item.id)
                else:
                    self._failed(item, error)
            return True

    def _failed(self, item: Item, error: Exception) -> None:
        current = self.records.get(JOBS, "job", item.id)
        if current is None or current.data.get("owner") != self.owner:
            return
        now, attempts = self.clock.now(), int(current.data["attempts"])
        message = error.message if isinstance(error, EngramError) else f"{type(error).__name__}: {error}"
        final = attempts >= MAX_ATTEMPTS or isinstance(error, EngramError)  # a domain error fails the same again
        data = dict(current.data, status="failed" if final else "pending", owner=None, lease_until=None)
        data |= {"error": message[:500], "due": iso(now + timedelta(seconds=min(60, 2**attempts)))}
        with contextlib.suppress(Conflict):  # taken meanwhile by another worker: its outcome counts
            self.records.transact([Write(JOBS, "job", item.id, data, "queue", current.version)], now)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending (jobs other processes hold included). Without a worker thread,
        the jobs run here, in the caller's thread."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        self._wake.set()
        while True:
            if not self._worker and self.run_once():
                continue
            if not self.busy():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def _work(ref: weakref.ref[StoreQueue], wake: threading.Event, stop: threading.Event) -> None:
    """The worker: runs jobs while there are some, then waits to be woken or polls. Ends with its queue, or when it
    is stopped."""
    while not stop.is_set():
        queue = ref()
        if queue is None:
            return
        try:
            busy = queue.run_once()
        except Exception:  # a store that is gone (a test's temporary folder) or briefly locked
            log.debug("job worker could not reach the store", exc_info=True)
            busy = False
        del queue
        if not busy:
            wake.wait(POLL)
            wake.clear()


class ManualQueue(StoreQueue):
    """A StoreQueue with no worker: jobs run only in `join` (tests that look at the state in between)."""

    def __init__(self, records: RecordStore, clock: Clock | None = None) -> None:
        super().__init__(records, clock, worker=False)
