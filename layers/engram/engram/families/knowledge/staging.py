"""A document whose chunks do not fit in one transaction (DynamoDB takes 50 writes; a 20-page PDF makes more
chunks than that): its chunks are written before the commit, in transactions of their own, under names only
this write uses (DESIGN §9, "nothing visible before the commit": no document names them until the commit).

A safety net committed first removes them unless a document came to name them: the writer withdraws it once
its commit is in, and removes them itself when it loses the commit; after a crash the net runs when due
(later than any writer can still be writing: a Lambda runs 15 minutes at most)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from engram.families.knowledge import STAGED_JOB
from engram.families.knowledge.base import DocumentsBase, chunk_ids
from engram.kernel.ports import Write
from engram.kernel.unit_of_work import UnitOfWork

STAGED_NET = timedelta(minutes=20)


class Staging(DocumentsBase):
    def _needs_staging(self, chunks: int, others: int) -> bool:
        """Whether `chunks` chunk writes and the commit's `others` writes would not fit in one transaction."""
        return chunks + others > self.records.max_writes

    def _stage(self, ctx: str, doc_id: str, prefix: str, chunk_writes: Sequence[Write], now: datetime) -> Write:
        """Write `chunk_writes` (ids `prefix` + position, a prefix of this write alone) ahead of the commit,
        their net committed first. Returns the net (`_committed` or `_lost` withdraws it)."""
        payload = {"context_id": ctx, "document_id": doc_id, "prefix": prefix, "count": len(chunk_writes)}
        uow = UnitOfWork(self.records, self.queue)
        try:
            net = uow.ahead(now, (STAGED_JOB, payload), chunk_writes, STAGED_NET)
        except BaseException:
            self.staged_job(payload)  # what was written before the failure
            raise
        return net

    def _committed(self, net: Write | None) -> None:
        """The commit naming the staged chunks is in: their net is withdrawn."""
        if net is not None:
            UnitOfWork(self.records, self.queue).withdraw(net)

    def _lost(self, net: Write | None) -> None:
        """The commit failed: the staged chunks go (unless it came through after all: a commit whose answer
        was lost), then their net."""
        if net is not None:
            self.staged_job(net.data["payload"])
            UnitOfWork(self.records, self.queue).withdraw(net)

    def staged_job(self, payload: dict[str, Any]) -> None:
        """The net of staged chunks, due: they go unless a version of their document names them (then the
        write that replaces that version retires them, as any chunks)."""
        ctx, doc_id, prefix = payload["context_id"], payload["document_id"], payload["prefix"]
        item = self.records.get(ctx, "document", doc_id)
        if item is not None and item.data.get("chunk_prefix") == prefix:
            return
        if any(h.data.get("chunk_prefix") == prefix for h in self.records.history(ctx, "document", doc_id)):
            return  # committed, then replaced: retired by the write that replaced it
        for chunk in chunk_ids(prefix, int(payload["count"])):
            self.records.purge(ctx, "chunk", chunk)
