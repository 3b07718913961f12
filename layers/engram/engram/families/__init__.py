"""Every family, and the catalogue of their operations. Adding a family: its package under `engram/families/`
(see `engram.kernel.family`), one line in NAMES, then `make template-routes` (its REST routes in template.yaml)."""

from __future__ import annotations

import importlib
from functools import cache

from engram.kernel.errors import InvalidInput
from engram.kernel.family import AnyFamily
from engram.kernel.operation import AnyOperation, Operations

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
    """Every family, loaded (its package: its declaration, kinds and services)."""
    return tuple(importlib.import_module(f"engram.families.{name}").FAMILY for name in NAMES)


@cache
def catalogue() -> dict[str, AnyOperation]:
    """Every operation by each of its names (tool, seed aliases), in the families' order: made once from each
    family's operations module (`OPERATIONS`); a name two operations take is refused."""
    found: dict[str, AnyOperation] = {}
    for name in NAMES:
        declared: Operations = importlib.import_module(f"engram.families.{name}.operations").OPERATIONS
        for op in declared:
            if op.family != name:
                raise ValueError(f"operation {op.name!r} of {op.family!r} is declared by family {name!r}")
            for n in op.names:
                if n in found:
                    raise ValueError(f"operation {n!r} declared twice")
                found[n] = op
    return found


def family(name: str) -> AnyFamily:
    found = next((f for f in all_families() if f.name == name), None)
    if found is None:
        raise KeyError(f"no family {name!r}")
    return found


def find(name: str) -> AnyOperation | None:
    return catalogue().get(name)


def select(tool_filter: set[str] | None = None, family: str | None = None) -> list[AnyOperation]:
    """Distinct operations, declaration order, narrowed by a filter of names or families. A filter that
    names a tool nobody declared is refused (Vectros: "unknown tool names fail fast at startup")."""
    ops = catalogue()
    if tool_filter is not None:
        unknown = sorted(tool_filter - set(ops) - set(NAMES))
        if unknown:
            raise InvalidInput(
                f"ENGRAM_MCP_TOOLS names unknown tools: {', '.join(unknown)} (tool or family names)",
                code="unknown_tool",
            )
    seen: dict[str, AnyOperation] = {}
    for op in ops.values():
        if family is not None and op.family != family:
            continue
        if tool_filter is not None and op.family not in tool_filter and not set(op.names) & tool_filter:
            continue
        seen.setdefault(op.name, op)
    return list(seen.values())


def families() -> list[str]:
    """The names of the families that declare operations."""
    return sorted({op.family for op in catalogue().values()})
