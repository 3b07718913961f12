"""Memory's eraser (`engram.erasure`): a subject's turns, attributes and sessions, every version of each, their
slots, their index documents, and recall's cached answers of the context. What the turns fed the entity graph is
the entities family's to erase.

Order, so that a job that dies half way and runs again finds what is left: the index documents first, then the
slots (found through their attributes), then the records — a record still there leads back to everything of
it."""

from __future__ import annotations

from engram.erasure import Counts, Subject, add, every, taken
from engram.families.memory.base import MemoryBase

OWNED = ("turn", "attribute", "session")
INDEXED = ("turn", "attribute")


class Erasing(MemoryBase):
    def erase(self, ctx: str, subject: Subject, dry_run: bool) -> Counts:
        counts: Counts = {}
        found = {kind: taken(self.records, ctx, kind, subject, counts) for kind in OWNED}
        add(counts, {"index": {kind: len(found[kind]) for kind in INDEXED}})
        attributes = set(found["attribute"])
        slots = [s.id for s in every(self.records, ctx, "slot") if s.data.get("attribute_id") in attributes]
        add(counts, {"records": {"slot": len(slots)}})
        if dry_run or not any(found.values()):
            return counts
        indexed = [i for kind in INDEXED for i in found[kind]]
        for start in range(0, len(indexed), 500):
            self.index.delete(ctx, indexed[start : start + 500])
        self.records.purge_many(ctx, "slot", slots)
        for kind in OWNED:
            self.records.purge_many(ctx, kind, found[kind])
        with self._lock:  # recall's answers of this context may quote what went
            for key in [k for k in self._cache if k[0] == ctx]:
                del self._cache[key]
        return counts
