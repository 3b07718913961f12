"""Working-context family: Cortex's `context_*` tools (JSON values by key, versioned, TTL, runs)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Services
from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.families.context.service import WorkingContext


class ContextServices(Services):
    @cached_property
    def workctx(self) -> WorkingContext:
        from engram.families.context.service import WorkingContext

        return WorkingContext(self.root.kernel)


FAMILY = Family(
    "context",
    ContextServices,
    function="ContextFunction",
    kinds={"ctxkey": Kind("context", "scoped")},
    seeds=("cortex",),
    warm=("context_list", {}),
    clients=("dynamodb",),
    eraser=lambda s: s.workctx.erase,
)
