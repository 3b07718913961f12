"""Operation declarations (the kernel's part of the registry). An operation = name (+ seed aliases), family,
input/output models, allowed principals, REST route and the function that calls the family's services. Nothing
else is written twice: `engram.api.mcp` and `engram.api.rest` build tools and routes from the registry
(`engram.families`: every family's operations, declared when its package is loaded).

An operation is typed: `Operation[S, I]` runs `run(services: S, caller, arguments: I, progress)`, where S is
its family's `Services` (`engram.kernel.family`) and I its input model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from engram.kernel.caller import Caller, Role
from engram.kernel.clock import bounded_time
from engram.kernel.errors import InvalidInput
from engram.kernel.limits import Bounded, check_arguments, where
from engram.kernel.ports import Progress

# Bounded shapes every operation uses (the limit policy, `engram.kernel.limits`; the values are enforced, not
# advertised: tools/list leaves lengths and counts out).
ScopePath = Annotated[str, Field(max_length=256)]
Selector = Annotated[list[Annotated[list[ScopePath], Field(max_length=16)]], Field(max_length=32)]
"""A DNF selector of scope paths: at most 32 clauses of at most 16 paths."""
Short = Annotated[str, Field(max_length=256)]
"""An id, a name, a cursor, a filter value."""


def _when(value: str | datetime) -> datetime:
    try:
        return bounded_time(value)
    except InvalidInput as exc:  # a ValueError for pydantic, which names the field
        raise ValueError(exc.message) from None


def _stamp(value: str) -> str:
    _when(value)
    return value


Stamp = Annotated[str, Field(max_length=64), AfterValidator(_stamp)]
"""An ISO 8601 time, between 1970 and 9999 UTC (`engram.kernel.clock.bounded_time`), kept as the caller wrote it."""
When = Annotated[datetime, AfterValidator(_when)]
"""The same bounds, parsed: an aware UTC datetime."""
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
            except (json.JSONDecodeError, RecursionError):  # not a JSON list, or nested deeper than the parser goes
                return value
        return value


class Passthrough(BaseModel):
    """The service's dict, carried through; the declared fields are the documented minimum."""

    model_config = ConfigDict(extra="allow")


Scalar = Annotated[str, Field(max_length=4096)] | int | float | bool


class TextOutput(BaseModel):
    text: str


S = TypeVar("S")  # the family's services
I = TypeVar("I", bound=OpInput)  # noqa: E741 - the operation's input model


@dataclass(frozen=True, kw_only=True)
class Operation(Generic[S, I]):
    name: str
    family: str
    summary: str
    input: type[I]
    output: type[BaseModel] | None  # None: plain text result
    principals: frozenset[Role]
    method: str
    path: str  # REST path below /api/v1/{context_id}
    run: Callable[[S, Caller, I, Progress], dict[str, Any] | str]
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
    # Of an operation that may write, the calls that only read (knowledge_collections' list and stats): write
    # quotas (writes a day, stored bytes) neither count nor refuse them.
    reads_when: Callable[[I], bool] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def writes(self, args: I) -> bool:
        """Whether a call may write: what write quotas count."""
        return not self.read_only and not (self.reads_when is not None and self.reads_when(args))

    def parse(self, arguments: dict[str, Any]) -> I:
        """The arguments of a call, from whatever transport brought them: what no argument may hold refused
        first (`engram.kernel.limits`), then the input model. InvalidInput names the field (`details.field`)."""
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


AnyOperation = Operation[Any, Any]


class Operations:
    """One module's operations, in declaration order: a family's operations module declares into its own, and the
    catalogue (`engram.families.catalogue`) is made from every family's — no table in the kernel that importing a
    family writes into."""

    def __init__(self) -> None:
        self._ops: list[AnyOperation] = []

    def declare(self, op: Operation[S, I]) -> Operation[S, I]:
        self._ops.append(op)
        return op

    def declare_all(self, *ops: AnyOperation) -> None:
        """Several operations at once (each typed where it is made: its runner takes its input model)."""
        self._ops.extend(ops)

    def extend(self, other: Operations) -> None:
        """Another module's, after these (a family whose operations live in several modules)."""
        self._ops.extend(other)

    def __iter__(self) -> Iterator[AnyOperation]:
        return iter(list(self._ops))


def all_names(ops: Iterable[AnyOperation]) -> list[str]:
    return [n for op in ops for n in op.names]
