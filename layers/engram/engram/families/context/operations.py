"""Working-context family: Cortex's `context_*` tools (JSON values by key, versioned, TTL, runs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, JsonValue

from engram.families.context import ContextServices
from engram.families.context.service import MAX_KEY, MAX_RUN, MAX_TTL
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.limits import Bounded
from engram.kernel.operation import Operation, Operations, OpInput
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

JSON_TYPES: list[JsonValue] = ["object", "array", "string", "number", "boolean", "null"]
KEY = Field(..., min_length=1, max_length=MAX_KEY)
RUN = Field(None, min_length=1, max_length=MAX_RUN, description="scope to a run")
EXPECTED = Field(None, ge=0, description="fail unless the key is at this version (0: new)")


class GetIn(OpInput):
    key: str = KEY
    run_id: str | None = RUN


class GetOut(BaseModel):
    key: str
    value: Any
    version: int
    expires_at: str | None
    updated_at: str
    run_id: str | None = None


def _get(services: ContextServices, caller: Caller, args: GetIn, progress: Progress) -> dict[str, Any]:
    return services.workctx.get(caller, args.key, args.run_id)


OPERATIONS.declare(
    Operation(
        name="context_get",
        family="context",
        summary="Get a context value by key.",
        input=GetIn,
        output=GetOut,
        principals=ANY,
        method="GET",
        path="/context/value",
        run=_get,
        read_only=True,
    )
)


class SetIn(OpInput):
    key: str = KEY
    value: Annotated[Any, Bounded("context_value")] = Field(..., json_schema_extra={"type": JSON_TYPES})
    ttl_seconds: int | None = Field(None, ge=1, le=MAX_TTL)
    run_id: str | None = RUN
    expected_version: int | None = EXPECTED


class SetOut(BaseModel):
    key: str
    version: int
    expires_at: str | None


def _set(services: ContextServices, caller: Caller, args: SetIn, progress: Progress) -> dict[str, Any]:
    return services.workctx.set(caller, args.key, args.value, args.ttl_seconds, args.run_id, args.expected_version)


OPERATIONS.declare(
    Operation(
        name="context_set",
        family="context",
        summary="Store a JSON value by key (versioned; optional TTL).",
        input=SetIn,
        output=SetOut,
        principals=WRITERS,
        method="PUT",
        path="/context/value",
        run=_set,
    )
)


class MergeIn(OpInput):
    key: str = KEY
    value: Annotated[Any, Bounded("context_value")] = Field(..., json_schema_extra={"type": JSON_TYPES})
    strategy: Literal["replace", "merge_shallow", "merge_deep", "append"] = "merge_deep"
    run_id: str | None = RUN
    expected_version: int | None = EXPECTED


class MergeOut(BaseModel):
    key: str
    version: int
    merged_keys: list[str]


def _merge(services: ContextServices, caller: Caller, args: MergeIn, progress: Progress) -> dict[str, Any]:
    return services.workctx.merge(caller, args.key, args.value, args.strategy, args.run_id, args.expected_version)


OPERATIONS.declare(
    Operation(
        name="context_merge",
        family="context",
        summary="Merge a value into a key atomically; append adds to an array (an array's items one by one).",
        input=MergeIn,
        output=MergeOut,
        principals=WRITERS,
        method="PATCH",
        path="/context/value",
        run=_merge,
    )
)


class ListIn(OpInput):
    prefix: str = Field("", max_length=MAX_KEY)
    run_id: str | None = RUN
    limit: int = Field(100, ge=1, le=1000)


class KeyOut(BaseModel):
    key: str
    version: int
    has_ttl: bool


class ListOut(BaseModel):
    keys: list[KeyOut]
    has_more: bool


def _list(services: ContextServices, caller: Caller, args: ListIn, progress: Progress) -> dict[str, Any]:
    return services.workctx.keys(caller, args.prefix, args.run_id, args.limit)


OPERATIONS.declare(
    Operation(
        name="context_list",
        family="context",
        summary="List context keys by prefix.",
        input=ListIn,
        output=ListOut,
        principals=ANY,
        method="GET",
        path="/context/keys",
        run=_list,
        read_only=True,
    )
)


class HistoryIn(OpInput):
    key: str = KEY
    limit: int = Field(20, ge=1, le=1000)
    run_id: str | None = RUN


class VersionOut(BaseModel):
    version: int
    value: Any
    updated_at: str
    actor: str


class HistoryOut(BaseModel):
    key: str
    versions: list[VersionOut]


def _history(services: ContextServices, caller: Caller, args: HistoryIn, progress: Progress) -> dict[str, Any]:
    return services.workctx.history(caller, args.key, args.run_id, args.limit)


OPERATIONS.declare(
    Operation(
        name="context_history",
        family="context",
        summary="A key's versions, newest first.",
        input=HistoryIn,
        output=HistoryOut,
        principals=ANY,
        method="GET",
        path="/context/history",
        run=_history,
        read_only=True,
    )
)
