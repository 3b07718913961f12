"""The records family's eraser (`engram.erasure`): a subject's records (typed records, identity records), every
version of each, their lookup entries (whose keys hold field values), their externalId pointers and their index
documents. What a record fed the entity graph is the entities family's to erase.

Order, so that a rerun finds what is left: index documents, lookup entries and pointers (found through the
records), then the records."""

from __future__ import annotations

from engram.erasure import Counts, Subject, add, every, taken
from engram.kernel import BaseService

KIND, LOOKUP, EXTID = "record", "rlookup", "rextid"


class RecordErasing(BaseService):
    def erase(self, ctx: str, subject: Subject, dry_run: bool) -> Counts:
        counts: Counts = {}
        ids = taken(self.records, ctx, KIND, subject, counts)
        owned = set(ids)
        lookups = [i.id for i in every(self.records, ctx, LOOKUP) if i.data.get("owner") in owned]
        pointers = [i.id for i in every(self.records, ctx, EXTID) if i.data.get("record_id") in owned]
        add(counts, {"records": {LOOKUP: len(lookups), EXTID: len(pointers)}, "index": {KIND: len(ids)}})
        if dry_run or not ids:
            return counts
        for start in range(0, len(ids), 500):
            self.index.delete(ctx, ids[start : start + 500])
        for kind, found in ((LOOKUP, lookups), (EXTID, pointers), (KIND, ids)):
            self.records.purge_many(ctx, kind, found)
        return counts
