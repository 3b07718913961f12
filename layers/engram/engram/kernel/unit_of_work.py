"""One unit of work for every write that also changes the search index: commit, then index, never lose either.

    items = uow.commit(writes, now, reindex=lambda items: ..., net=("records.index", payload), jobs=[...])

1. The writes commit in one version-checked transaction together with a **safety-net job** (`net`: due
   SAFETY_NET later) and any **jobs** that finish the work in the background (due now: embedding, the graph).
2. `reindex` runs at once on the committed items (the index is brought up to date on the write's path, so a
   search right after the write finds it).
3. The jobs are started (a message on SQS; a nudge to the local worker) — after `reindex`, so a background
   job's fuller index documents (with vectors) are never overwritten by the write's quick ones.
4. The safety net is withdrawn once `reindex` succeeded; if it failed, or the process died in between, the
   safety net does the same work from the store when it is due (the queue retries it with backoff).

Nothing is visible in the index before the commit, and nothing acknowledged is ever left unindexed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from engram.kernel.ports import Item, RecordStore, Write
from engram.kernel.queue import Queue

log = logging.getLogger("engram.uow")
SAFETY_NET = timedelta(seconds=30)


class UnitOfWork:
    def __init__(self, records: RecordStore, queue: Queue) -> None:
        self.records, self.queue = records, queue

    def commit(
        self,
        writes: Sequence[Write],
        now: datetime,
        reindex: Callable[[list[Item]], None] | None = None,
        net: tuple[str, dict[str, Any]] | None = None,
        jobs: Sequence[Write] = (),
        covered: bool = False,
    ) -> list[Item]:
        """Commit `writes` (with the safety net and `jobs`), start the jobs, run `reindex` on what was committed
        and withdraw the net when it succeeded. `covered`: one of `jobs` redoes the index work anyway (a
        document's embedding job), so a failing `reindex` is logged, not raised. Returns the committed items of
        `writes` (not the jobs')."""
        safety = self.queue.job(net[0], net[1], now, delay=SAFETY_NET) if net is not None else None
        extra = [*jobs, *([safety] if safety is not None else [])]
        items = self.records.transact([*writes, *extra], now)[: len(writes)]
        try:
            if reindex is not None:
                reindex(items)
        except Exception:
            if safety is None and not covered:
                raise
            log.exception("indexing a committed write failed; its jobs will do it (%s)", net[0] if net else "")
            return items
        finally:
            self.queue.started(extra)
        if safety is not None:
            self.queue.done(safety)
        return items

    def batch(self, now: datetime, net: tuple[str, dict[str, Any]], work: Callable[[], Sequence[Write]]) -> None:
        """A write of many transactions (an import's batch of files): its safety net committed first (a crash
        in the middle leaves it to finish the batch), then `work` (the writes and their quick index; it returns
        the jobs that finish in the background, committed and started after it), then the net withdrawn."""
        safety = self.queue.job(net[0], net[1], now, delay=SAFETY_NET)
        self.records.transact([safety], now)
        self.queue.started([safety])
        jobs = list(work())
        if jobs:
            self.records.transact(jobs, now)
            self.queue.started(jobs)
        self.queue.done(safety)

    def ahead(self, now: datetime, net: tuple[str, dict[str, Any]], writes: Sequence[Write], delay: timedelta) -> Write:
        """Writes too many for the transaction of the commit that will name them, made ahead of it under names
        nobody reads yet: their net (due after `delay`: it undoes them unless that commit came) committed
        first, then the writes in transactions the store takes. Returns the net, for `withdraw`."""
        safety = self.queue.job(net[0], net[1], now, delay=delay)
        self.records.transact([safety], now)
        self.queue.started([safety])
        step = self.records.max_writes
        for start in range(0, len(writes), step):
            self.records.transact(writes[start : start + step], now)
        return safety

    def withdraw(self, net: Write) -> None:
        """The commit `ahead`'s writes waited for is in (or they were undone): their net is withdrawn."""
        self.queue.done(net)
