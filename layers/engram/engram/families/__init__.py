"""Every family, and the registry of their operations. Adding a family: its package under `engram/families/`
(see `engram.kernel.family`), one line in NAMES, then `make template-routes` (its REST routes in template.yaml)."""

from __future__ import annotations

import importlib
from functools import cache

from engram.kernel.errors import InvalidInput
from engram.kernel.family import AnyFamily
from engram.kernel.operation import REGISTRY, AnyOperation

NAMES = (
    "memory",
    "knowledge",
    "context",
    "conversation",
    "entities",
    "identity",
    "records",
    "workspace",
)


@cache
def all_families() -> tuple[AnyFamily, ...]:
    """Every family, loaded: its operations in the registry (its kinds go to the root's catalogue: `Kinds`)."""
    out = []
    for name in NAMES:
        family: AnyFamily = importlib.import_module(f"engram.families.{name}").FAMILY
        importlib.import_module(f"engram.families.{name}.operations")
        out.append(family)
    return tuple(out)


def family(name: str) -> AnyFamily:
    found = next((f for f in all_families() if f.name == name), None)
    if found is None:
        raise KeyError(f"no family {name!r}")
    return found


def find(name: str) -> AnyOperation | None:
    all_families()
    return REGISTRY.get(name)


def select(tool_filter: set[str] | None = None, family: str | None = None) -> list[AnyOperation]:
    """Distinct operations, declaration order, narrowed by a filter of names or families. A filter that
    names a tool nobody declared is refused (Vectros: "unknown tool names fail fast at startup")."""
    all_families()
    if tool_filter is not None:
        unknown = sorted(tool_filter - set(REGISTRY) - set(NAMES))
        if unknown:
            raise InvalidInput(
                f"ENGRAM_MCP_TOOLS names unknown tools: {', '.join(unknown)} (tool or family names)",
                code="unknown_tool",
            )
    seen: dict[str, AnyOperation] = {}
    for op in REGISTRY.values():
        if family is not None and op.family != family:
            continue
        if tool_filter is not None and op.family not in tool_filter and not set(op.names) & tool_filter:
            continue
        seen.setdefault(op.name, op)
    return list(seen.values())


def families() -> list[str]:
    """The names of the families that declare operations."""
    all_families()
    return sorted({op.family for op in REGISTRY.values()})
