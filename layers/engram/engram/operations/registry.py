"""Operation declarations. An operation = name (+ seed aliases), family, input/output models,
allowed principals, REST route and the function that calls the service. Nothing else is written
twice: `engram.api.mcp` and `engram.api.rest` build tools and routes from `REGISTRY`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engram.errors import InvalidInput
from engram.limits import Bounded, check_arguments, where
from engram.services.identity import Caller, Role
from engram.services.memory import Progress

if TYPE_CHECKING:
    from engram.wiring import Engram

# Bounded shapes every operation uses (the limit policy, `engram.limits`; the values are enforced, not
# advertised: tools/list leaves lengths and counts out).
ScopePath = Annotated[str, Field(max_length=256)]
Selector = Annotated[list[Annotated[list[ScopePath], Field(max_length=16)]], Field(max_length=32)]
"""A DNF selector of scope paths: at most 32 clauses of at most 16 paths."""
Short = Annotated[str, Field(max_length=256)]
"""An id, a name, a cursor, a filter value."""
Stamp = Annotated[str, Field(max_length=64)]
"""An ISO 8601 time."""
Metadata = Annotated[dict[str, Any], Bounded("metadata")]
Filter = Annotated[dict[str, Any], Bounded("filter")]


class OpInput(BaseModel):
    """Base of every operation input: unknown arguments are refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    context_id: str | None = Field(None, description="Tenant; default: the key's only context")

    @field_validator("*", mode="before")
    @classmethod
    def _json_in_query(cls, value: Any, info: Any) -> Any:
        # REST GET routes carry DNF selectors as JSON text in the query string.
        if info.field_name not in ("scopes", "lens"):
            return value
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str) and value[0].startswith("["):
            value = value[0]
        if isinstance(value, str) and value.startswith("["):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return value
        return value


class Passthrough(BaseModel):
    """The service's dict, carried through; the declared fields are the documented minimum."""

    model_config = ConfigDict(extra="allow")


Scalar = Annotated[str, Field(max_length=4096)] | int | float | bool


class TextOutput(BaseModel):
    text: str


Runner = Callable[["Engram", Caller, Any, Progress], dict[str, Any] | str]


@dataclass(frozen=True)
class Operation:
    name: str
    family: str
    summary: str
    input: type[OpInput]
    output: type[BaseModel] | None  # None: plain text result
    principals: frozenset[Role]
    method: str
    path: str  # REST path below /api/v1/{context_id}
    run: Runner
    aliases: tuple[str, ...] = ()
    read_only: bool = False
    also: tuple[str, ...] = ()  # further REST paths for the same operation (seed route names)
    mcp_limits: dict[str, tuple[int, int]] | None = None  # field -> (MCP default, MCP max)
    # How MCP reports a failure: an `isError` result (Spectron, Cortex, Vectros), a JSON-RPC error with code
    # -32002 naming the tool (Causantic's tools, as its document says), or a JSON-RPC error with Agrama's
    # codes and `data {details, tool, timestamp}` (Agrama's).
    errors: Literal["result", "jsonrpc", "agrama"] = "result"
    # Arguments whose presence means the call is another seed's dialect, to which `mcp_limits` do not apply
    # (hybrid_search: Agrama's arguments; Vectros' MCP caps are Vectros' own).
    mcp_limits_unless: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def parse(self, arguments: dict[str, Any]) -> OpInput:
        """The arguments of a call, from whatever transport brought them: what no argument may hold refused
        first (`engram.limits`), then the input model. InvalidInput names the field (`details.field`)."""
        check_arguments(arguments)
        try:
            return self.input.model_validate(arguments)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            field = where(tuple(errors[0]["loc"])) if errors else "arguments"
            raise InvalidInput(validation_message(exc), details={"field": field}) from None


def validation_message(exc: ValidationError) -> str:
    """One message for every transport: `invalid arguments: payload.a: ...; k: ...`."""
    parts = [f"{where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)]
    return "invalid arguments: " + "; ".join(parts)


REGISTRY: dict[str, Operation] = {}


def declare(op: Operation) -> Operation:
    for name in op.names:
        if name in REGISTRY:
            raise ValueError(f"operation {name!r} declared twice")
        REGISTRY[name] = op
    return op


def find(name: str) -> Operation | None:
    _load()
    return REGISTRY.get(name)


def select(tool_filter: set[str] | None = None, family: str | None = None) -> list[Operation]:
    """Distinct operations, declaration order, narrowed by a filter of names or families. A filter that
    names a tool nobody declared is refused (Vectros: "unknown tool names fail fast at startup")."""
    _load()
    if tool_filter is not None:
        unknown = sorted(tool_filter - set(REGISTRY) - set(families()))
        if unknown:
            raise InvalidInput(
                f"ENGRAM_MCP_TOOLS names unknown tools: {', '.join(unknown)} (tool or family names)",
                code="unknown_tool",
            )
    seen: dict[str, Operation] = {}
    for op in REGISTRY.values():
        if family is not None and op.family != family:
            continue
        if tool_filter is not None and op.family not in tool_filter and not set(op.names) & tool_filter:
            continue
        seen.setdefault(op.name, op)
    return list(seen.values())


def families() -> list[str]:
    _load()
    return sorted({op.family for op in REGISTRY.values()})


def _load() -> None:
    # Each family module declares its operations on import; a new family is one new module here.
    from engram.operations import (  # noqa: F401
        context,
        conversation,
        entities,
        identity,
        knowledge,
        memory,
        records,
        workspace,
    )


def all_names(ops: Iterable[Operation]) -> list[str]:
    return [n for op in ops for n in op.names]
