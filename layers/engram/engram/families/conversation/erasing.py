"""The conversation family's eraser (`engram.trust.erasure`): a subject's threads and messages (summaries are
messages too), every version, and the messages' index documents. What the messages fed the entity graph is the
entities family's to erase; what a thread's user messages stored as memories, memory's.

Order, so that a rerun finds what is left: messages (each batch's index documents, then the messages), then
threads.

Its reindexer (`reindex`, `engram.search.reindex`) names the jobs that index the family's objects
again from the store."""

from __future__ import annotations

from collections.abc import Iterator

from engram.families.conversation import INDEX_JOB
from engram.kernel.services import BaseService
from engram.search.reindex import Keep, Reindex, by_ids
from engram.trust.erasure import Subject, Unit, batched, mine


class ConversationErasing(BaseService):
    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        found = {kind: mine(self.records, ctx, kind, subject) for kind in ("message", "thread")}
        yield from batched(self.records, ctx, "message", found["message"], self.index.delete)
        yield from batched(self.records, ctx, "thread", found["thread"])

    def reindex(self, ctx: str, keep: Keep) -> Iterator[Reindex]:
        """The kept messages indexed again (`engram.search.reindex`)."""
        return by_ids(INDEX_JOB, self.records, ctx, "message", keep)
