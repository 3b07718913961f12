"""The in-process Queue adapters: named jobs, JSON payloads, failures contained."""

from __future__ import annotations

import threading

import pytest

from engram.queue import ManualQueue, ThreadQueue


def test_thread_queue_runs_jobs_in_order_and_survives_a_failing_one() -> None:
    q = ThreadQueue()
    seen: list[int] = []
    q.register("record", lambda p: seen.append(p["n"]))
    q.register("boom", lambda p: (_ for _ in ()).throw(RuntimeError("boom")))
    for n in range(3):
        q.submit("record", {"n": n})
    q.submit("boom", {})
    q.submit("record", {"n": 3})
    assert q.join(5) and seen == [0, 1, 2, 3]


def test_submit_refuses_unknown_jobs_and_payloads_a_message_queue_cannot_carry() -> None:
    q = ManualQueue()
    q.register("ok", lambda p: None)
    with pytest.raises(KeyError):
        q.submit("missing", {})
    with pytest.raises(TypeError):
        q.submit("ok", {"lock": threading.Lock()})
    assert q.jobs == []


def test_join_times_out_while_a_job_runs() -> None:
    q = ThreadQueue()
    release = threading.Event()
    q.register("wait", lambda p: release.wait(5))
    q.submit("wait", {})
    assert not q.join(0.05)
    release.set()
    assert q.join(5)
