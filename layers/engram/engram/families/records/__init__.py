"""Records family: schemas, typed and versioned records, lookups and history (Vectros' `schema_*`, `record_*`
and `history_*` tools)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.families.records.erasing import RecordErasing
    from engram.families.records.history import History
    from engram.families.records.schemas import SchemaService
    from engram.families.records.service import RecordService

INDEX_JOB = "records.index"


class RecordsServices(Services):
    @cached_property
    def schemas(self) -> SchemaService:
        from engram.families.records.schemas import SchemaService

        return SchemaService(self.root.kernel)

    @cached_property
    def typed(self) -> RecordService:
        """Typed records (the root's `records` is the record store they live in)."""
        from engram.families.records.service import RecordService

        return RecordService(self.root.kernel, self.schemas)

    @cached_property
    def history(self) -> History:
        from engram.families.records.history import History

        return History(self.root.kernel)

    @cached_property
    def erasing(self) -> RecordErasing:
        from engram.families.records.erasing import RecordErasing

        return RecordErasing(self.root.kernel)


FAMILY = Family(
    "records",
    RecordsServices,
    function="RecordsFunction",
    jobs={INDEX_JOB: Job(lambda s: s.typed.index_job)},
    kinds={
        "schema": Kind("records", "context"),
        "record": Kind("records", "scoped", indexed=True),
        "rlookup": Kind("records", "via", "record"),
        "rextid": Kind("records", "system"),  # an externalId's record, seen only through can_see
    },
    seeds=("vectros",),
    warm=("list_schemas", {}),
    eraser=lambda s: s.erasing.erase,
    reindexer=lambda s: s.erasing.reindex,
)
