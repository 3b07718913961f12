"""Working-context family: Cortex's `context_*` tools (JSON values by key, versioned, TTL, runs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, JsonValue

from engram.families.context import ContextServices
from engram.families.context.service import MAX_KEY, MAX_RUN, MAX_TTL
from engram.identity import ANY, WRITERS, Caller
from engram.limits import Bounded
from engram.operation import Operation, OpInput, declare
from engram.ports import Progress

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


def _get(s: ContextServices, c: Caller, a: GetIn, p: Progress) -> dict[str, Any]:
    return s.workctx.get(c, a.key, a.run_id)


declare(
    Operation(
        "context_get", "context", "Get a context value by key.", GetIn, GetOut, ANY, "GET", "/context/value", _get,
        read_only=True,
    )
)  # fmt: skip


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


def _set(s: ContextServices, c: Caller, a: SetIn, p: Progress) -> dict[str, Any]:
    return s.workctx.set(c, a.key, a.value, a.ttl_seconds, a.run_id, a.expected_version)


declare(
    Operation(
        "context_set", "context", "Store a JSON value by key (versioned; optional TTL).", SetIn, SetOut, WRITERS,
        "PUT", "/context/value", _set,
    )
)  # fmt: skip


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


def _merge(s: ContextServices, c: Caller, a: MergeIn, p: Progress) -> dict[str, Any]:
    return s.workctx.merge(c, a.key, a.value, a.strategy, a.run_id, a.expected_version)


declare(
    Operation(
        "context_merge", "context",
        "Merge a value into a key atomically; append adds to an array (an array's items one by one).",
        MergeIn, MergeOut, WRITERS, "PATCH", "/context/value", _merge,
    )
)  # fmt: skip


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


def _list(s: ContextServices, c: Caller, a: ListIn, p: Progress) -> dict[str, Any]:
    return s.workctx.keys(c, a.prefix, a.run_id, a.limit)


declare(
    Operation(
        "context_list", "context", "List context keys by prefix.", ListIn, ListOut, ANY, "GET", "/context/keys", _list,
        read_only=True,
    )
)  # fmt: skip


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


def _history(s: ContextServices, c: Caller, a: HistoryIn, p: Progress) -> dict[str, Any]:
    return s.workctx.history(c, a.key, a.run_id, a.limit)


declare(
    Operation(
        "context_history", "context", "A key's versions, newest first.", HistoryIn, HistoryOut, ANY, "GET",
        "/context/history", _history, read_only=True,
    )
)  # fmt: skip
