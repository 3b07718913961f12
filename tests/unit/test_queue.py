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


@pytest.mark.parametrize("make", ["manual", "thread"])
def test_jobs_waiting_together_reach_a_batch_handler_together(make: str) -> None:
    import threading as _threading

    from engram.queue import ManualQueue, ThreadQueue

    q = ManualQueue() if make == "manual" else ThreadQueue()
    seen: list[list[int]] = []
    gate = _threading.Event()
    q.register("slow", lambda p: gate.wait(5))
    q.register("embed", lambda p: seen.append([p["n"]]), batch=lambda ps: seen.append([p["n"] for p in ps]))
    q.register("other", lambda p: seen.append([-1]))
    q.submit("slow", {})  # holds the worker while the rest queue up behind it
    for n in range(3):
        q.submit("embed", {"n": n})
    q.submit("other", {})
    q.submit("embed", {"n": 3})
    gate.set()
    assert q.join(10)
    assert seen == [[0, 1, 2], [-1], [3]]


def test_sqs_batches_reach_a_batch_handler_together() -> None:
    from engram.adapters.aws.sqs_queue import SqsQueue

    sqs = SqsQueue(None, "unused")
    got: list[list[int]] = []
    sqs.register("embed", lambda p: got.append([p["n"]]), batch=lambda ps: got.append([p["n"] for p in ps]))
    records = [{"messageId": f"m{n}", "body": f'{{"job": "embed", "payload": {{"n": {n}}}}}'} for n in range(3)]
    assert sqs.handle_batch(records) == [] and got == [[0, 1, 2]]
