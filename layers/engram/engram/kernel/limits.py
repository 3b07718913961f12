"""The one limit policy: what every argument of every operation may hold, declared once, enforced on every
transport (REST, MCP over HTTP, stdio, Lambda events all parse arguments through `check_arguments` and the
operation's input model), and listed in the manual (docs/limits.md).

Every argument, wherever it sits:
- strings are valid Unicode: no lone surrogate (`"\\ud800"` is valid JSON text, but no UTF-8 store, index
  or response can hold it, so it would fail every later read of the object);
- numbers are finite, and integers lie within ±(2**63 − 1) (what every store and index takes as a number);
- objects and arrays nest at most MAX_DEPTH deep.

Every free-form field (arbitrary JSON a caller stores: metadata, context values, payloads, schemas, decisions,
CRDT operations, filters) names its bound in its input model, `Annotated[..., Bounded("metadata")]`: at most
so many bytes as compact JSON and so deep. A test walks every operation and fails on a free-form field without
one, or a string field without a length.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from engram.kernel.errors import InvalidInput

KiB = 1024
MiB = 1024 * KiB
MAX_DEPTH = 32  # objects and arrays inside objects and arrays, in any argument
MAX_INT = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
NOT_UNICODE = "is not valid Unicode (it holds a lone surrogate)"


@dataclass(frozen=True)
class Bound:
    bytes: int  # as compact JSON (UTF-8)
    depth: int  # nesting of objects and arrays, the field's own value counting as 1
    what: str  # where it applies (the manual's table, docs/limits.md)


BOUNDS: dict[str, Bound] = {
    "metadata": Bound(16 * KiB, 8, "metadata of memories, messages, entities, documents, folders and records"),
    "context_value": Bound(256 * KiB, MAX_DEPTH, "a working-context value (`context_set`, `context_merge`)"),
    "payload": Bound(64 * KiB, MAX_DEPTH, "a record's or typed document's payload"),
    "json_schema": Bound(64 * KiB, MAX_DEPTH, "a registered JSON Schema (`schemas_create`)"),
    "decision": Bound(64 * KiB, 16, "a decision's `context` (`record_decision`)"),
    "crdt_operations": Bound(1 * MiB, 4, "one `sync_document` call's operations (at most 500)"),
    "vector_clock": Bound(16 * KiB, 2, "a vector clock (`sync_document`)"),
    "filter": Bound(16 * KiB, 4, "search filters (`metadata_filter`, `metadataFilters`, `filter`)"),
    "documents": Bound(32 * MiB, 8, "one `knowledge_bulk_ingest` call's documents (the request limit)"),
}


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON (UTF-8); models count as what they hold."""
    from pydantic_core import to_json

    try:
        return len(to_json(value))
    except Exception:  # what pydantic cannot write (a lone surrogate, refused before): count it as text
        return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8", "replace"))


def depth_of(value: Any) -> int:
    """How deep objects and arrays nest in `value` (a scalar: 0)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


class Bounded:
    """`Annotated[T, Bounded("metadata")]`: the field's value, as compact JSON, holds at most its bound's bytes
    and nests at most its depth. The error names the field (pydantic's location) and the limit."""

    def __init__(self, kind: str) -> None:
        self.kind, self.bound = kind, BOUNDS[kind]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def check(self, value: Any) -> Any:
        if value is None:
            return value
        depth = depth_of(value)
        if depth > self.bound.depth:
            raise PydanticCustomError(
                "too_deep",
                "nests {depth} levels deep; the limit is {limit}",
                {"depth": depth, "limit": self.bound.depth},
            )
        size = json_size(value)
        if size > self.bound.bytes:
            raise PydanticCustomError(
                "too_large", "is {size} bytes as JSON; the limit is {limit}", {"size": size, "limit": self.bound.bytes}
            )
        return value


def where(path: tuple[str | int, ...]) -> str:
    """`payload.items[2].name` from a location."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "arguments"


def problems(value: Any, root: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(location, what is wrong) for each value anywhere in `value` that no argument may hold."""
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, root, 0)]
    while stack:
        node, at, depth = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and _SURROGATE.search(node):
                yield at, NOT_UNICODE
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not -MAX_INT <= node <= MAX_INT:
                yield at, "is an integer out of range (at most ±(2**63 − 1))"
        elif isinstance(node, float):
            if not math.isfinite(node):
                yield at, "is not a finite number"
        elif isinstance(node, dict | list | tuple):
            if depth >= MAX_DEPTH:
                yield at, f"nests deeper than {MAX_DEPTH} levels"
                continue
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                    yield (*at, "<key>"), NOT_UNICODE
                stack.append((child, (*at, key), depth + 1))


def lone_surrogates(value: Any) -> Iterator[tuple[str | int, ...]]:
    """The location of every string (or object key) in `value` that holds a lone surrogate."""
    return (at for at, what in problems(value) if what == NOT_UNICODE)


def check_arguments(arguments: Any, root: tuple[str | int, ...] = ()) -> None:
    """Refuse arguments that hold what no argument may (see the module's docstring): InvalidInput naming the
    first such field."""
    for at, what in problems(arguments, root):
        name = where(at)
        raise InvalidInput(f"invalid arguments: {name} {what}", details={"field": name})


def scrub(value: Any) -> Any:
    """`value` with lone surrogates replaced by U+FFFD and non-finite numbers by null: what a response holds
    when something stored before these rules held them (no read may fail because of what a caller wrote)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if not value.isascii() else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value
