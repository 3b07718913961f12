"""One unit of work for commit + job + index + withdraw (`engram.kernel.unit_of_work`, issue #24): its order and what
a failure leaves, with fakes of the queue and the store; and that no family writes the pattern by hand again
(it was written five times, and memory's copy never started its safety net: on SQS it was never sent)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engram.kernel.ports import Item, Write
from engram.kernel.unit_of_work import UnitOfWork

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "engram" / "engram"


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []


class FakeStore:
    max_writes = 50

    def __init__(self, log: Log) -> None:
        self.log = log

    def transact(self, writes: list[Write], now: datetime) -> list[Item]:
        self.log.events.append("commit " + " ".join(w.kind for w in writes))
        return [Item(w.context_id, w.kind, w.id, 1, w.data, w.actor, now, now) for w in writes]


class FakeQueue:
    def __init__(self, log: Log) -> None:
        self.log = log

    def job(self, name: str, payload: dict[str, Any], now: datetime, delay: Any = None) -> Write:
        return Write("_jobs", "job", name, {"name": name, "delayed": delay is not None}, "q")

    def started(self, jobs: list[Write]) -> None:
        self.log.events.append("started " + " ".join(j.id for j in jobs))

    def done(self, job: Write) -> None:
        self.log.events.append("done " + job.id)


def uow() -> tuple[UnitOfWork, Log]:
    log = Log()
    return UnitOfWork(FakeStore(log), FakeQueue(log)), log  # type: ignore[arg-type]


def test_commit_then_index_then_start_then_withdraw() -> None:
    work, log = uow()
    extra = Write("_jobs", "job", "graph", {}, "q")
    record = Write("c", "record", "r1", {}, "a")
    items = work.commit([record], NOW, reindex=lambda i: log.events.append(f"index {i[0].id}"), net=("net", {}),
                        jobs=[extra])  # fmt: skip
    assert [i.id for i in items] == ["r1"]  # the writes' items, not the jobs'
    assert log.events == ["commit record job job", "index r1", "started graph net", "done net"]


def test_a_failed_index_leaves_the_safety_net_to_do_it_and_starts_it_all_the_same() -> None:
    work, log = uow()

    def fails(_: list[Item]) -> None:
        raise RuntimeError("index down")

    work.commit([Write("c", "record", "r1", {}, "a")], NOW, reindex=fails, net=("net", {}))
    assert log.events == ["commit record job", "started net"]  # no "done": the net stays and will run
    with pytest.raises(RuntimeError):  # without a net (or a covering job) the failure is the caller's
        work.commit([Write("c", "record", "r2", {}, "a")], NOW, reindex=fails)
    embed = Write("_jobs", "job", "embed", {}, "q")
    work.commit([Write("c", "record", "r3", {}, "a")], NOW, reindex=fails, jobs=[embed], covered=True)
    assert log.events[-1] == "started embed"


def test_no_service_writes_the_pattern_by_hand() -> None:
    """Withdrawing a job (`queue.done`) and starting committed jobs (`queue.started`) happen in the unit of work
    (and the queues themselves) only."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("unit_of_work.py", "queue.py") or "adapters" in path.parts:
            continue
        text = path.read_text()
        if re.search(r"\bqueue\.(done|started)\(", text):
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []
