"""The store-backed Queue (engram.kernel.queue.StoreQueue): durable jobs, leases, retries, batches, many workers."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engram.adapters.local.sqlite_records import SqliteRecordStore
from engram.kernel.clock import FixedClock, iso
from engram.kernel.ports import Write
from engram.kernel.queue import JOBS, LEASE, MAX_ATTEMPTS, StoreQueue

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> SqliteRecordStore:
    return SqliteRecordStore(tmp_path / "records.db")


def drain(q: StoreQueue, clock: FixedClock, rounds: int = 20) -> None:
    """Run every job, moving time past each backoff."""
    for _ in range(rounds):
        while q.run_once():
            pass
        if not q.pending():
            return
        clock.current += timedelta(seconds=61)
    raise AssertionError("jobs never finished")


def test_jobs_run_in_order_a_failing_one_is_retried_then_kept_failed_with_its_error(store: SqliteRecordStore) -> None:
    clock = FixedClock(T0)
    q = StoreQueue(store, clock, worker=False)
    seen: list[int] = []
    tries: list[int] = []
    q.register("record", lambda p: seen.append(p["n"]))
    q.register("boom", lambda p: (tries.append(1), (_ for _ in ()).throw(RuntimeError("disk on fire"))))
    for n in range(3):
        q.submit("record", {"n": n})
    q.submit("boom", {})
    q.submit("record", {"n": 3})
    drain(q, clock)
    assert seen == [0, 1, 2, 3]
    assert len(tries) == MAX_ATTEMPTS  # retried with backoff, then given up on
    [failed] = q.failed()
    assert failed.data["status"] == "failed" and failed.data["error"] == "RuntimeError: disk on fire"
    assert q.pending() == []


def test_busy_reads_past_a_page_of_failed_jobs_to_the_one_still_waiting(store: SqliteRecordStore) -> None:
    clock = FixedClock(T0)
    q = StoreQueue(store, clock, worker=False)
    q.register("boom", lambda p: (_ for _ in ()).throw(RuntimeError("no")))
    q.register("ok", lambda p: None)
    for _ in range(20):  # more failed jobs than busy() reads a page
        q.submit("boom", {})
    drain(q, clock)
    assert len(q.failed()) == 20 and not q.busy()
    q.submit("ok", {})
    assert q.busy() and len(q.pending()) == 1
    assert q.run_once() and not q.busy()
    assert q.join(timeout=1)


def test_a_batch_gathers_its_jobs_past_passable_ones_and_stops_at_any_other(store: SqliteRecordStore) -> None:
    q = StoreQueue(store, worker=False)
    order: list[str] = []
    q.register("embed", lambda p: order.append(f"embed {p['n']}"), batch=lambda ps: order.append(f"embed {ps}"))
    q.register("graph", lambda p: order.append(f"graph {p['n']}"), passable=True)
    q.register("erase", lambda p: order.append("erase"))
    for n in range(3):  # each write: its embedding job, then its graph job
        q.submit("embed", {"n": n})
        q.submit("graph", {"n": n})
    q.submit("erase", {})
    q.submit("embed", {"n": 3})
    while q.run_once():
        pass
    assert order == [
        "embed [{'n': 0}, {'n': 1}, {'n': 2}]",  # one batch, past the graph jobs between them ...
        "graph 0",  # ... which then run in their own order
        "graph 1",
        "graph 2",
        "erase",  # never passed: the embedding after it waits for it
        "embed 3",
    ]


def test_submit_refuses_unknown_jobs_and_payloads_a_message_queue_cannot_carry(store: SqliteRecordStore) -> None:
    q = StoreQueue(store, worker=False)
    q.register("ok", lambda p: None)
    with pytest.raises(KeyError):
        q.submit("missing", {})
    with pytest.raises(TypeError):
        q.submit("ok", {"lock": threading.Lock()})
    assert q.pending() == []


def test_a_job_is_committed_with_the_write_that_needs_it_or_not_at_all(store: SqliteRecordStore) -> None:
    from engram.kernel.errors import Conflict

    q = StoreQueue(store, worker=False)
    q.register("index", lambda p: None)
    store.transact([Write("acme", "doc", "d1", {}, "t")], T0)
    with pytest.raises(Conflict):  # the write's version check fails: the job goes with it
        store.transact([Write("acme", "doc", "d1", {}, "t", expected_version=0), q.job("index", {}, T0)], T0)
    assert q.pending() == []
    store.transact([Write("acme", "doc", "d1", {}, "t", expected_version=1), q.job("index", {}, T0)], T0)
    assert len(q.pending()) == 1


def test_join_times_out_while_a_job_runs(store: SqliteRecordStore) -> None:
    q = StoreQueue(store)
    release = threading.Event()
    q.register("wait", lambda p: release.wait(5))
    q.submit("wait", {})
    assert not q.join(0.2)
    release.set()
    assert q.join(5)


def test_jobs_waiting_together_reach_a_batch_handler_together(store: SqliteRecordStore) -> None:
    q = StoreQueue(store, worker=False)
    seen: list[list[int]] = []
    q.register("embed", lambda p: seen.append([p["n"]]), batch=lambda ps: seen.append([p["n"] for p in ps]))
    q.register("other", lambda p: seen.append([-1]))
    for n in range(3):
        q.submit("embed", {"n": n})
    q.submit("other", {})
    q.submit("embed", {"n": 3})
    assert q.join(10)
    assert seen == [[0, 1, 2], [-1], [3]]


def _lease(store: SqliteRecordStore, q: StoreQueue, owner: str, until: datetime) -> None:
    [job] = q.pending()
    data = dict(job.data, status="leased", owner=owner, lease_until=iso(until), attempts=1)
    store.transact([Write(JOBS, "job", job.id, data, "t", job.version)], T0)


def test_a_live_owners_lease_holds_until_it_runs_out(store: SqliteRecordStore) -> None:
    import os
    import socket

    clock = FixedClock(T0)
    q = StoreQueue(store, clock, worker=False)
    ran: list[int] = []
    q.register("work", lambda p: ran.append(1))
    q.submit("work", {})
    _lease(store, q, f"{socket.gethostname()}:{os.getppid()}", T0 + LEASE)  # a live process holds it
    assert not q.run_once() and ran == []
    clock.current = T0 + LEASE + timedelta(seconds=1)
    assert q.run_once() and ran == [1] and q.pending() == []


def test_a_dead_owners_job_is_taken_at_once(store: SqliteRecordStore) -> None:
    import socket

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)
    clock = FixedClock(T0)
    q = StoreQueue(store, clock, worker=False)
    ran: list[int] = []
    q.register("work", lambda p: ran.append(1))
    q.submit("work", {})
    _lease(store, q, f"{socket.gethostname()}:{dead_pid}", T0 + LEASE)
    assert q.run_once() and ran == [1]


def test_many_workers_on_one_store_run_each_job_exactly_once(tmp_path: Path) -> None:
    """Four queues (as four processes would have) over one SQLite file, 200 jobs."""
    seen: list[int] = []
    lock = threading.Lock()

    def record(p: dict[str, int]) -> None:
        with lock:
            seen.append(p["n"])

    queues = [StoreQueue(SqliteRecordStore(tmp_path / "records.db"), worker=False) for _ in range(4)]
    for q in queues:
        q.register("record", record)
    for n in range(200):
        queues[n % 4].submit("record", {"n": n})

    def drain_one(q: StoreQueue) -> None:
        while q.run_once():
            pass

    threads = [threading.Thread(target=drain_one, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(seen) == list(range(200))  # none lost, none twice
    assert queues[0].pending() == []


def test_sqs_batches_reach_a_batch_handler_together() -> None:
    from engram.adapters.aws.sqs_queue import SqsQueue

    sqs = SqsQueue(None, "unused")
    got: list[list[int]] = []
    sqs.register("embed", lambda p: got.append([p["n"]]), batch=lambda ps: got.append([p["n"] for p in ps]))
    records = [{"messageId": f"m{n}", "body": f'{{"job": "embed", "payload": {{"n": {n}}}}}'} for n in range(3)]
    assert sqs.handle_batch(records) == [] and got == [[0, 1, 2]]


def test_a_stopped_queue_leaves_new_jobs_in_the_store_and_join_runs_them(store: SqliteRecordStore) -> None:
    q = StoreQueue(store)
    seen: list[int] = []
    q.register("record", lambda p: seen.append(p["n"]))
    q.submit("record", {"n": 1})
    assert q.join(5) and seen == [1]
    worker = q._thread
    q.stop()
    assert worker is not None and not worker.is_alive()  # ended, not left polling the store
    q.submit("record", {"n": 2})
    later = StoreQueue(store, worker=False)  # the next engine over the same store finds it there
    assert [i.data["payload"]["n"] for i in later.pending()] == [2] and seen == [1]
    assert q.join(5) and seen == [1, 2]  # run in the caller's thread
