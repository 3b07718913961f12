"""Memory family: Spectron's and Causantic's memory tools — turns, extracted attributes, sessions, recall."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.families.memory.causantic import CausanticService
    from engram.families.memory.service import MemoryService

INDEX_JOB = "memory.index"
EXPIRE_JOB = "memory.expire"  # a memory stored with a time to live, swept when it is up


class MemoryServices(Services):
    @cached_property
    def memory(self) -> MemoryService:
        from engram.families.memory.service import MemoryService

        return MemoryService(self.root.kernel, self.root.settings.recall_cache_size)

    @cached_property
    def causantic(self) -> CausanticService:
        from engram.families.memory.causantic import CausanticService

        return CausanticService(self.memory, self.root.settings.token_budget)


FAMILY = Family(
    "memory",
    MemoryServices,
    function="MemoryFunction",
    jobs={INDEX_JOB: Job(lambda s: s.memory.index_job), EXPIRE_JOB: Job(lambda s: s.memory.expire_job)},
    kinds={
        "turn": Kind("memory", "scoped", indexed=True),
        "attribute": Kind("memory", "scoped", indexed=True),
        "session": Kind("memory", "scoped"),
        "slot": Kind("memory", "via", "attribute"),
    },
    seeds=("spectron", "causantic"),
    warm=("memory_profile", {}),
    eraser=lambda s: s.memory.erase,
    reindexer=lambda s: s.memory.reindex,
)
