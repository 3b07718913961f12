"""The conversation family's eraser (`engram.erasure`): a subject's threads and messages (summaries are
messages too), every version, and the messages' index documents. What the messages fed the entity graph is the
entities family's to erase; what a thread's user messages stored as memories, memory's.

Order, so that a rerun finds what is left: index documents, then messages, then threads."""

from __future__ import annotations

from engram.erasure import Counts, Subject, add, every
from engram.kernel import BaseService


class ConversationErasing(BaseService):
    def erase(self, ctx: str, subject: Subject, dry_run: bool) -> Counts:
        counts: Counts = {}
        found: dict[str, list[str]] = {"message": [], "thread": []}
        for kind in ("message", "thread"):
            for item in list(every(self.records, ctx, kind)):
                if subject.takes(item):
                    found[kind].append(item.id)
                    versions = len(self.records.history(ctx, kind, item.id))
                    add(counts, {"records": {kind: 1}, "versions": {kind: versions}})
        add(counts, {"index": {"message": len(found["message"])}})
        if dry_run:
            return counts
        for start in range(0, len(found["message"]), 500):
            self.index.delete(ctx, found["message"][start : start + 500])
        for kind in ("message", "thread"):
            for id_ in found[kind]:
                self.records.purge(ctx, kind, id_)
        return counts
