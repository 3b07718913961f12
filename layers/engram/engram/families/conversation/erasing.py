"""The conversation family's eraser (`engram.erasure`): a subject's threads and messages (summaries are
messages too), every version, and the messages' index documents. What the messages fed the entity graph is the
entities family's to erase; what a thread's user messages stored as memories, memory's.

Order, so that a rerun finds what is left: index documents, then messages, then threads."""

from __future__ import annotations

from engram.erasure import Counts, Subject, add, taken
from engram.kernel import BaseService


class ConversationErasing(BaseService):
    def erase(self, ctx: str, subject: Subject, dry_run: bool) -> Counts:
        counts: Counts = {}
        found = {kind: taken(self.records, ctx, kind, subject, counts) for kind in ("message", "thread")}
        add(counts, {"index": {"message": len(found["message"])}})
        if dry_run:
            return counts
        for start in range(0, len(found["message"]), 500):
            self.index.delete(ctx, found["message"][start : start + 500])
        for kind in ("message", "thread"):
            self.records.purge_many(ctx, kind, found[kind])
        return counts
