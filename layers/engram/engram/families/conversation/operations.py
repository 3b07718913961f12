"""Conversation family: Cortex's `conversation_*` tools (threads of messages, history, search, summaries)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from engram.families.conversation import ConversationServices
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.clock import parse_time
from engram.kernel.operation import Metadata, Operation, Operations, OpInput, When
from engram.kernel.ports import Progress
from engram.search.time_phrases import window_of

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

THREAD = Field(..., min_length=1, max_length=256)
NAMESPACE = Field(None, min_length=1, max_length=256, description="a scope path inside the key's grant")


class AppendIn(OpInput):
    thread_id: str = THREAD
    role: Literal["user", "assistant", "system", "tool"]
    content: str = Field(..., min_length=1, max_length=32_000)
    metadata: Metadata | None = None
    namespace: str | None = NAMESPACE
    extract_facts: bool | None = Field(None, description="user messages also feed memory (kept per thread)")


class AppendOut(BaseModel):
    message_id: str
    thread_id: str
    created_at: str


def _append(services: ConversationServices, caller: Caller, args: AppendIn, progress: Progress) -> dict[str, Any]:
    return services.conversation.append(
        caller, args.thread_id, args.role, args.content, args.metadata, args.namespace, extract_facts=args.extract_facts
    )


OPERATIONS.declare(
    Operation(
        name="conversation_append",
        family="conversation",
        summary="Add a message to a thread.",
        input=AppendIn,
        output=AppendOut,
        principals=WRITERS,
        method="POST",
        path="/threads/messages",
        run=_append,
    )
)


class HistoryIn(OpInput):
    thread_id: str = THREAD
    limit: int = Field(50, ge=1, le=1000)
    before: str | None = Field(None, max_length=64, description="ISO 8601")
    after: str | None = Field(None, max_length=64, description="ISO 8601")
    include_compressed: bool = Field(False, description="also messages a summary stands in for")
    namespace: str | None = NAMESPACE


class MessageOut(BaseModel):
    id: str
    role: str
    content: str
    created_at: str
    metadata: dict[str, Any] | None = None
    compressed: bool | None = None


class HistoryOut(BaseModel):
    thread_id: str
    messages: list[MessageOut]
    has_more: bool


def _history(services: ConversationServices, caller: Caller, args: HistoryIn, progress: Progress) -> dict[str, Any]:
    return services.conversation.history(
        caller, args.thread_id, args.limit, args.before, args.after, args.include_compressed, args.namespace
    )


OPERATIONS.declare(
    Operation(
        name="conversation_history",
        family="conversation",
        summary="A thread's messages, oldest first.",
        input=HistoryIn,
        output=HistoryOut,
        principals=ANY,
        method="GET",
        path="/threads/messages",
        run=_history,
        read_only=True,
    )
)


class SearchIn(OpInput):
    query: str = Field(..., min_length=1, max_length=4000)
    thread_id: str | None = Field(None, min_length=1, max_length=256)
    namespace: str | None = NAMESPACE
    limit: int = Field(10, ge=1, le=100)
    threshold: float | None = Field(None, ge=0, le=1, description="min score (0-1; 0.5 = a match)")
    since: When | None = None
    until: When | None = None
    timezone: str | None = Field(None, max_length=64, description="IANA time zone")


class FoundOut(BaseModel):
    message_id: str
    thread_id: str
    role: str
    content: str
    score: float
    created_at: str
    compressed: bool


class SearchOut(BaseModel):
    results: list[FoundOut]
    time: dict[str, str | None] | None = Field(None, description="how the query's time words were read")


def _search(services: ConversationServices, caller: Caller, args: SearchIn, progress: Progress) -> dict[str, Any]:
    rest, window = window_of(
        args.query, services.root.clock.now(), args.timezone, parse_time(args.since), parse_time(args.until)
    )
    query = args.query if window is not None and window.soft else rest  # a preference's words stay searched
    found = services.conversation.search(
        caller, query, args.thread_id, args.namespace, args.limit, args.threshold, window
    )
    return found if window is None else dict(found, time=window.said())


OPERATIONS.declare(
    Operation(
        name="conversation_search",
        family="conversation",
        summary="Search messages (hybrid), optionally in one thread.",
        input=SearchIn,
        output=SearchOut,
        principals=ANY,
        method="POST",
        path="/threads/search",
        run=_search,
        read_only=True,
    )
)


class SummarizeIn(OpInput):
    thread_id: str = THREAD
    keep_recent: int = Field(10, ge=0, le=1000)
    namespace: str | None = NAMESPACE


class SummarizeOut(BaseModel):
    thread_id: str
    summary: str
    original_count: int
    compressed_count: int


def _summarize(services: ConversationServices, caller: Caller, args: SummarizeIn, progress: Progress) -> dict[str, Any]:
    return services.conversation.summarize(caller, args.thread_id, args.keep_recent, args.namespace)


OPERATIONS.declare(
    Operation(
        name="conversation_summarize",
        family="conversation",
        summary="Compress older messages into a summary (nothing is deleted).",
        input=SummarizeIn,
        output=SummarizeOut,
        principals=WRITERS,
        method="POST",
        path="/threads/summarize",
        run=_summarize,
    )
)
