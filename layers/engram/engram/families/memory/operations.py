"""Memory family: Spectron's memory tools and Causantic's tools."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from engram.families.memory import MemoryServices
from engram.families.memory.base import Turn
from engram.families.memory.results import validate_query
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.clock import parse_time
from engram.kernel.errors import InvalidInput
from engram.kernel.limits import Bounded
from engram.kernel.operation import Operation, Operations, OpInput, Scalar, Selector, Stamp, When
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

MAX_CONTENT = 32_000
MAX_QUERY = 4_000
MAX_K = 100
TTL_MAX = 10 * 366 * 86_400  # ten years

Meta = Annotated[dict[str, Scalar], Bounded("metadata")]
SCOPES = Field(None, description="DNF of scope paths to tag")
LENS = Field(None, description="DNF scope filter")


class StoreIn(OpInput):
    content: str = Field(..., min_length=1, max_length=MAX_CONTENT)
    role: str = Field("user", max_length=64)
    session_id: str | None = Field(None, max_length=128)
    scopes: Selector | None = SCOPES
    said_at: When | None = Field(None, description="ISO 8601; default now")
    metadata: Meta | None = None
    ttl_seconds: int | None = Field(None, ge=1, le=TTL_MAX, description="forget it after")
    expires_at: When | None = Field(None, description="ISO 8601: forget it then")


class EntityOut(BaseModel):
    id: list[str]
    action: str


class AttributeOut(BaseModel):
    key: str
    value: str
    category: str
    action: Literal["created", "updated", "superseded", "unchanged"]
    previous: str | None = None


class StoreOut(BaseModel):
    turn_id: str
    session_id: str
    entities: list[EntityOut]
    attributes: list[AttributeOut]
    relations: list[dict[str, Any]]
    instructions: list[dict[str, Any]]
    uncertainties: list[dict[str, Any]]
    corrections: list[dict[str, Any]]
    traceId: str = ""


def _turn(a: StoreIn | TurnIn, now: datetime) -> Turn:
    """The turn a call gives, its time to live made a moment (one of ttl_seconds and expires_at; in the future)."""
    if a.ttl_seconds is not None and a.expires_at is not None:
        raise InvalidInput("give ttl_seconds or expires_at, not both", details={"field": "expires_at"})
    expires = now + timedelta(seconds=a.ttl_seconds) if a.ttl_seconds is not None else parse_time(a.expires_at)
    if expires is not None and expires <= now:
        raise InvalidInput("expires_at lies in the past", details={"field": "expires_at"})
    return Turn(a.content, a.role, a.session_id, parse_time(a.said_at), a.metadata, expires)


def _store(services: MemoryServices, caller: Caller, args: StoreIn, progress: Progress) -> dict[str, Any]:
    return services.memory.store(caller, _turn(args, services.memory.clock.now()), args.scopes)


OPERATIONS.declare(
    Operation(
        name="memory_store",
        family="memory",
        summary="Store a conversation turn; extracts and reconciles facts.",
        input=StoreIn,
        output=StoreOut,
        principals=WRITERS,
        method="POST",
        path="/facts",
        run=_store,
    )
)


class TurnIn(BaseModel):
    model_config = StoreIn.model_config
    content: str = Field(..., min_length=1, max_length=MAX_CONTENT)
    role: str = Field("user", max_length=64)
    session_id: str | None = Field(None, max_length=128)
    said_at: When | None = None
    metadata: Meta | None = None
    ttl_seconds: int | None = Field(None, ge=1, le=TTL_MAX)
    expires_at: When | None = None


class BatchIn(OpInput):
    turns: list[TurnIn] = Field(..., min_length=1, max_length=200)
    scopes: Selector | None = SCOPES


class BatchOut(BaseModel):
    results: list[StoreOut]
    traceId: str = ""


def _batch(services: MemoryServices, caller: Caller, args: BatchIn, progress: Progress) -> dict[str, Any]:
    return {
        "results": services.memory.store_many(
            caller, [_turn(t, services.memory.clock.now()) for t in args.turns], args.scopes
        )
    }


OPERATIONS.declare(
    Operation(
        name="memory_store_batch",
        family="memory",
        summary="Store several turns at once (multi-turn capture).",
        input=BatchIn,
        output=BatchOut,
        principals=WRITERS,
        method="POST",
        path="/facts/batch",
        run=_batch,
    )
)


class RecallIn(OpInput):
    query: str = Field(..., min_length=1, max_length=MAX_QUERY)
    k: int = Field(10, ge=1, le=MAX_K)
    lens: Selector | None = LENS
    as_of: When | None = Field(None, description="ISO 8601: what was valid then")
    mode: Literal["hybrid", "bm25", "vector"] = "hybrid"
    since: When | None = None
    until: When | None = None
    timezone: str | None = Field(None, max_length=64, description="IANA time zone")


class TimeRead(BaseModel):
    """How the query's time words (or since / until) were read: the window searched, in UTC."""

    since: str | None
    until: str | None
    read: str | None
    timezone: str


class RecallHit(BaseModel):
    id: str
    kind: str
    text: str
    score: float
    said_at: str | None = None
    session_id: str | None = None
    metadata: dict[str, Any] = {}


class RecallOut(BaseModel):
    context: str
    tier: Literal["direct", "cache", "hybrid", "full_context"]
    queryMs: float
    results: list[RecallHit]
    traceId: str = ""
    time: TimeRead | None = None


def _recall(services: MemoryServices, caller: Caller, args: RecallIn, progress: Progress) -> dict[str, Any]:
    return services.memory.recall_said(
        caller,
        validate_query(args.query),
        k=args.k,
        lens=args.lens,
        as_of=parse_time(args.as_of),
        mode=args.mode,
        since=parse_time(args.since),
        until=parse_time(args.until),
        timezone=args.timezone,
    )


OPERATIONS.declare(
    Operation(
        name="memory_recall",
        family="memory",
        summary="Recall memory for a query as a prompt-ready context block.",
        input=RecallIn,
        output=RecallOut,
        principals=ANY,
        method="POST",
        path="/context",
        run=_recall,
        read_only=True,
    )
)


class ReflectIn(OpInput):
    query: str = Field(..., min_length=1, max_length=MAX_QUERY)
    persist: bool = Field(False, description="Store the reflection (supervisor/management)")
    lens: Selector | None = LENS


class ReflectOut(BaseModel):
    reflection: str
    evidence: list[str]
    persisted_attributes: list[dict[str, Any]]
    traceId: str = ""


def _reflect(services: MemoryServices, caller: Caller, args: ReflectIn, progress: Progress) -> dict[str, Any]:
    return services.memory.reflect(caller, validate_query(args.query), args.persist, args.lens, progress)


OPERATIONS.declare(
    Operation(
        name="memory_reflect",
        family="memory",
        summary="Find patterns across memory, with evidence ids.",
        input=ReflectIn,
        output=ReflectOut,
        principals=ANY,
        method="POST",
        path="/reflect",
        run=_reflect,
    )
)


class ProfileIn(OpInput):
    scopes: Selector | None = Field(None, description="DNF selector of the profile's scope")


class ProfileOut(BaseModel):
    static: list[dict[str, Any]]
    dynamic: list[dict[str, Any]]
    preferences: list[dict[str, Any]]
    instructions: list[dict[str, Any]]
    experiential: list[dict[str, Any]] = []


def _profile(services: MemoryServices, caller: Caller, args: ProfileIn, progress: Progress) -> dict[str, Any]:
    return services.memory.profile(caller, args.scopes)


class TimelineIn(OpInput):
    subject: str | None = Field(None, max_length=200, description="Whose facts (default: everyone's)")
    key: str | None = Field(None, max_length=200, description="One attribute, e.g. location")
    limit: int = Field(500, ge=1, le=5000)


class TimelineOut(BaseModel):
    facts: list[dict[str, Any]]
    total: int


def _timeline(services: MemoryServices, caller: Caller, args: TimelineIn, progress: Progress) -> dict[str, Any]:
    return services.memory.timeline(caller, args.subject, args.key, args.limit)


OPERATIONS.declare(
    Operation(
        name="memory_timeline",
        family="memory",
        summary="Facts with their validity windows, past ones too.",
        input=TimelineIn,
        output=TimelineOut,
        principals=ANY,
        method="GET",
        path="/timeline",
        run=_timeline,
        read_only=True,
    )
)


OPERATIONS.declare(
    Operation(
        name="memory_profile",
        family="memory",
        summary="Profile for a scope: static, dynamic, preferences, instructions.",
        input=ProfileIn,
        output=ProfileOut,
        principals=ANY,
        method="GET",
        path="/profile",
        run=_profile,
        read_only=True,
    )
)


class ForgetIn(OpInput):
    query: str = Field(..., min_length=1, max_length=MAX_QUERY)
    scopes: Selector | None = SCOPES


class ForgetOut(BaseModel):
    deleted: int
    ids: list[str] = []
    traceId: str = ""


def _forget(services: MemoryServices, caller: Caller, args: ForgetIn, progress: Progress) -> dict[str, Any]:
    return services.memory.forget(caller, validate_query(args.query), args.scopes)


OPERATIONS.declare(
    Operation(
        name="memory_forget",
        family="memory",
        summary="Stop believing matching facts (sets valid_until; deletes nothing).",
        input=ForgetIn,
        output=ForgetOut,
        principals=WRITERS,
        method="POST",
        path="/forget",
        run=_forget,
    )
)

# -- Causantic ---------------------------------------------------------------------------------

PROJECT = Field(None, max_length=256, description="scope path or its last segment")
Range = Literal["short", "long"]


class CRecallIn(OpInput):
    query: str = Field(..., min_length=1, max_length=MAX_QUERY)
    range: Range = "short"
    project: str | None = PROJECT


class ExplainIn(OpInput):
    topic: str = Field(..., min_length=1, max_length=MAX_QUERY)
    range: Range = "long"
    project: str | None = PROJECT


class PredictIn(OpInput):
    context: str = Field(..., min_length=1, max_length=MAX_CONTENT)
    project: str | None = PROJECT


class NoArgs(OpInput):
    pass


class SessionsIn(OpInput):
    project: str = Field(..., min_length=1, max_length=256)
    from_: Stamp | None = Field(None, alias="from", description="ISO 8601")
    to: Stamp | None = Field(None, description="ISO 8601")
    days_back: float | None = Field(None, gt=0, le=36500)


class ReconstructIn(SessionsIn):
    session_id: str | None = Field(None, max_length=128)
    previous_session: bool = False
    current_session_id: str | None = Field(None, max_length=128)
    keep_newest: bool = True


def _c_recall(services: MemoryServices, caller: Caller, args: CRecallIn, progress: Progress) -> str:
    return services.causantic.recall(caller, validate_query(args.query), args.range, args.project)


def _explain(services: MemoryServices, caller: Caller, args: ExplainIn, progress: Progress) -> str:
    return services.causantic.recall(caller, validate_query(args.topic), args.range, args.project)


def _predict(services: MemoryServices, caller: Caller, args: PredictIn, progress: Progress) -> str:
    return services.causantic.predict(caller, validate_query(args.context), args.project)


def _projects(services: MemoryServices, caller: Caller, args: NoArgs, progress: Progress) -> str:
    return services.causantic.list_projects(caller)


def _sessions(services: MemoryServices, caller: Caller, args: SessionsIn, progress: Progress) -> str:
    return services.causantic.list_sessions(caller, args.project, args.from_, args.to, args.days_back)


def _reconstruct(services: MemoryServices, caller: Caller, args: ReconstructIn, progress: Progress) -> str:
    return services.causantic.reconstruct(
        caller,
        args.project,
        session_id=args.session_id,
        start=args.from_,
        end=args.to,
        days_back=args.days_back,
        previous_session=args.previous_session,
        current_session_id=args.current_session_id,
        keep_newest=args.keep_newest,
    )


OPERATIONS.declare_all(
    Operation(
        name="recall",
        family="memory",
        summary="Recall context from memory (range short/long, optional project).",
        input=CRecallIn,
        output=None,
        principals=ANY,
        method="POST",
        path="/recall",
        run=_c_recall,
        read_only=True,
        errors="jsonrpc",
    ),
    Operation(
        name="explain",
        family="memory",
        summary="Explain the history behind a topic across sessions.",
        input=ExplainIn,
        output=None,
        principals=ANY,
        method="POST",
        path="/explain",
        run=_explain,
        read_only=True,
        errors="jsonrpc",
    ),
    Operation(
        name="predict",
        family="memory",
        summary="Surface context likely relevant to the current discussion.",
        input=PredictIn,
        output=None,
        principals=ANY,
        method="POST",
        path="/predict",
        run=_predict,
        read_only=True,
        errors="jsonrpc",
    ),
    Operation(
        name="list-projects",
        family="memory",
        summary="List projects in memory with chunk counts and date ranges.",
        input=NoArgs,
        output=None,
        principals=ANY,
        method="GET",
        path="/projects",
        run=_projects,
        read_only=True,
        errors="jsonrpc",
    ),
    Operation(
        name="list-sessions",
        family="memory",
        summary="List a project's sessions with times, chunks and tokens.",
        input=SessionsIn,
        output=None,
        principals=ANY,
        method="GET",
        path="/sessions",
        run=_sessions,
        read_only=True,
        errors="jsonrpc",
    ),
    Operation(
        name="reconstruct",
        family="memory",
        summary="Rebuild a project's session context chronologically.",
        input=ReconstructIn,
        output=None,
        principals=ANY,
        method="POST",
        path="/reconstruct",
        run=_reconstruct,
        read_only=True,
    ),
)
