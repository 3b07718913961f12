"""The records family's eraser (`engram.trust.erasure`): a subject's records (typed records, identity records), every
version of each, their lookup entries (whose keys hold field values), their externalId pointers and their index
documents. What a record fed the entity graph is the entities family's to erase.

Order, so that a rerun finds what is left: for each batch of records, their index documents, lookup entries and
pointers (found through the records), then the records.

Its reindexer (`reindex`, `engram.search.reindex`) names the jobs that index the family's objects
again from the store."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from engram.families.records import INDEX_JOB
from engram.kernel.services import BaseService
from engram.search.reindex import Keep, Reindex, by_ids
from engram.trust.erasure import Counts, Subject, Unit, batched, mine, pointing

KIND, LOOKUP, EXTID = "record", "rlookup", "rextid"


class RecordErasing(BaseService):
    def reindex(self, ctx: str, keep: Keep) -> Iterator[Reindex]:
        """The kept records indexed again (`engram.search.reindex`): a deleted one taken out."""
        return by_ids(INDEX_JOB, self.records, ctx, KIND, keep)

    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        ids = mine(self.records, ctx, KIND, subject)
        lookups = pointing(self.records, ctx, ((LOOKUP, "owner"), (EXTID, "record_id")), set(ids))

        def entries(batch: list[str]) -> tuple[Counts, Callable[[], object]]:
            by_kind = {kind: [i for r in batch for k, i in lookups.get(r, ()) if k == kind] for kind in (LOOKUP, EXTID)}

            def step() -> None:
                for kind, of_kind in by_kind.items():
                    self.records.purge_many(ctx, kind, of_kind)

            return {"records": {k: len(v) for k, v in by_kind.items()}}, step

        yield from batched(self.records, ctx, KIND, ids, self.index.delete, entries)
