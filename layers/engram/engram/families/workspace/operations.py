"""Workspace family: Agrama's code workspace tools (files with provenance, code search, dependencies,
decisions, CRDT sessions, Engram's own performance figures). Agrama reports a tool's failure as a JSON-RPC
error with its codes (`errors="agrama"`); its `hybrid_search` is the knowledge family's
(`engram.families.knowledge.operations.search`), which answers both seeds' arguments."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from engram.families.workspace import WorkspaceServices
from engram.families.workspace.files import NewFile
from engram.families.workspace.shapes import MAX_FILE_BYTES, MAX_PATH
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.limits import Bounded
from engram.kernel.operation import Operation, Operations, OpInput, Passthrough, Stamp
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

PATH = Field(..., min_length=1, max_length=MAX_PATH, description="File path inside the workspace")
WINDOW = Field("1h", max_length=8, pattern=r"^\d{1,6}[smhdw]$", description="e.g. 1h, 24h, 7d")


Out = Passthrough


class ReadIn(OpInput):
    path: str = PATH
    include_history: bool = False
    history_limit: int = Field(5, ge=1, le=100)
    include_semantic_context: bool = True
    include_dependencies: bool = True
    include_collaborative_context: bool = False
    dependency_depth: int = Field(2, ge=1, le=10)
    semantic_similarity_threshold: float = Field(0.7, ge=0, le=1)


class ReadOut(Out):
    path: str
    exists: bool
    content: str | None


def _read(services: WorkspaceServices, caller: Caller, args: ReadIn, progress: Progress) -> dict[str, Any]:
    return services.codeviews.read(caller, args)


class WriteIn(OpInput):
    path: str = PATH
    content: str = Field(..., max_length=MAX_FILE_BYTES)
    reason: str = Field(..., min_length=1, max_length=2000)
    agent_id: str | None = Field(None, max_length=128)
    create_backup: bool = True
    validate_syntax: bool = True
    update_dependencies: bool = True
    collaborative_mode: bool = False


class WriteOut(Out):
    success: bool
    path: str
    version: int


def _write(services: WorkspaceServices, caller: Caller, args: WriteIn, progress: Progress) -> dict[str, Any]:
    done = services.workspace.write(
        caller,
        NewFile(args.path, args.content, args.reason, args.agent_id, args.validate_syntax, args.update_dependencies),
    )
    item = done["item"]
    prov = item.data["provenance"]
    out = {
        "success": True,
        "path": item.data["path"],
        "version": item.version,
        "backup_created": bool(args.create_backup and done["backup_path"]),
        "backup_path": done["backup_path"] if args.create_backup else None,
        "syntax_valid": True if args.validate_syntax else None,
        "language": item.data["language"],
        "dependencies_updated": args.update_dependencies,
        "provenance": {
            "agent_id": prov["agent_id"],
            "timestamp": prov["timestamp"],
            "reason": prov["reason"],
            "principal": prov["principal"],
            "key_id": prov["key_id"],
        },
        "impact_analysis": {
            "files_affected": len(done["dependents"]),
            "affected_files": done["dependents"],
            "dependency_changes": done["changes"],
        },
    }
    if args.collaborative_mode:
        out["collaborative_sessions"] = services.collab.sessions(caller, item.data["path"])
    return out


class SemanticIn(OpInput):
    query: str = Field(..., min_length=1, max_length=4000)
    embedding_model: str = Field("matryoshka", max_length=64, description="accepted; Engram embeds with its own")
    embedding_dimension: int = Field(1024, ge=64, le=3072)
    max_results: int = Field(10, ge=1, le=100)
    similarity_threshold: float = Field(0.7, ge=0, le=1)


def _semantic(services: WorkspaceServices, caller: Caller, args: SemanticIn, progress: Progress) -> dict[str, Any]:
    return services.codeviews.semantic(caller, args)


class DepsIn(OpInput):
    file_path: str = PATH
    max_depth: int = Field(3, ge=1, le=10)
    direction: Literal["forward", "reverse", "bidirectional"] = "bidirectional"
    include_impact_analysis: bool = True


def _deps(services: WorkspaceServices, caller: Caller, args: DepsIn, progress: Progress) -> dict[str, Any]:
    return services.codeviews.dependencies(caller, args)


ContextType = Literal["project", "recent_changes", "active_sessions", "performance", "errors"]


class ContextIn(OpInput):
    context_types: list[ContextType] = Field(["project"], max_length=5)
    time_range: str = WINDOW
    include_metrics: bool = True
    include_active_sessions: bool = False


def _context(services: WorkspaceServices, caller: Caller, args: ContextIn, progress: Progress) -> dict[str, Any]:
    return services.codeviews.context(caller, args)


class DecisionIn(OpInput):
    decision: str = Field(..., min_length=1, max_length=2000)
    reasoning: str = Field(..., min_length=1, max_length=20000)
    context: Annotated[dict[str, JsonValue], Bounded("decision")] = Field(
        {}, description="what was known when deciding"
    )
    confidence: float = Field(0.5, ge=0, le=1)
    alternatives: list[str] = Field([], max_length=50)
    impact: Literal["low", "medium", "high", "critical"] = "medium"


def _decision(services: WorkspaceServices, caller: Caller, args: DecisionIn, progress: Progress) -> dict[str, Any]:
    return services.collab.record_decision(caller, args.model_dump(exclude={"context_id"}))


class TimeRange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: Stamp | None = Field(None, description="ISO 8601")
    end: Stamp | None = Field(None, description="ISO 8601")


ChangeType = Literal["create", "update"]
CHANGES: tuple[ChangeType, ...] = ("create", "update")


class HistoryIn(OpInput):
    entity_id: str = Field(..., min_length=1, max_length=MAX_PATH, description="a file path or a decision id")
    time_range: TimeRange | None = None
    change_types: list[ChangeType] = Field(default_factory=lambda: list(CHANGES), max_length=2)
    include_diff: bool = False
    max_results: int = Field(20, ge=1, le=1000)


def _history(services: WorkspaceServices, caller: Caller, args: HistoryIn, progress: Progress) -> dict[str, Any]:
    return services.codeviews.history(caller, args)


class SessionIn(OpInput):
    session_name: str = Field(..., min_length=1, max_length=200)
    participants: list[str] = Field([], max_length=50)
    document_paths: list[str] = Field([], max_length=100)
    session_type: str = Field("editing", max_length=64)
    enable_real_time: bool = True


def _session(services: WorkspaceServices, caller: Caller, args: SessionIn, progress: Progress) -> dict[str, Any]:
    return services.collab.create_session(
        caller, args.session_name, args.participants, args.document_paths, args.session_type, args.enable_real_time
    )


Clock = Annotated[dict[Annotated[str, Field(max_length=128)], int], Bounded("vector_clock")]


class OperationIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["insert", "delete"]
    position: int = Field(..., ge=0, le=MAX_FILE_BYTES)
    content: str = Field("", max_length=MAX_FILE_BYTES)
    length: int = Field(0, ge=0, le=MAX_FILE_BYTES, description="delete: how many characters")
    vector_clock: Clock | None = None


class SyncIn(OpInput):
    document_id: str = PATH
    operations: Annotated[list[OperationIn], Bounded("crdt_operations")] = Field(..., min_length=1, max_length=500)
    vector_clock: Clock = Field(default_factory=dict)
    agent_id: str = Field(..., min_length=1, max_length=128)
    session_id: str | None = Field(None, max_length=64, description="default: the document's open session")


def _sync(services: WorkspaceServices, caller: Caller, args: SyncIn, progress: Progress) -> dict[str, Any]:
    from engram.families.workspace.collab import Edit

    edits = [Edit(o.type, o.position, o.content, o.length, o.vector_clock) for o in args.operations]
    return services.collab.sync(caller, args.document_id, edits, args.vector_clock, args.agent_id, args.session_id)


class MetricsIn(OpInput):
    metric_types: list[Literal["latency", "throughput", "memory", "health"]] = Field(
        ["latency", "throughput", "memory", "health"], max_length=4
    )
    time_window: str = WINDOW
    include_percentiles: bool = True
    include_system_metrics: bool = False


def _metrics(services: WorkspaceServices, caller: Caller, args: MetricsIn, progress: Progress) -> dict[str, Any]:
    return services.codeviews.metrics(
        caller, args.metric_types, args.time_window, args.include_percentiles, args.include_system_metrics
    )


OPERATIONS.declare_all(
    Operation(
        name="read_code",
        family="workspace",
        summary="Read a file with its history, similar files, dependencies and sessions.",
        input=ReadIn,
        output=ReadOut,
        principals=ANY,
        method="POST",
        path="/code/read",
        run=_read,
        read_only=True,
        errors="agrama",
    ),
    Operation(
        name="write_code",
        family="workspace",
        summary="Write a file (new version with provenance; syntax checked; imports graphed).",
        input=WriteIn,
        output=WriteOut,
        principals=WRITERS,
        method="POST",
        path="/code/write",
        run=_write,
        errors="agrama",
    ),
    Operation(
        name="semantic_search",
        family="workspace",
        summary="Find code by meaning.",
        input=SemanticIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/code/semantic",
        run=_semantic,
        read_only=True,
        errors="agrama",
    ),
    Operation(
        name="analyze_dependencies",
        family="workspace",
        summary="A file's imports and importers, to a depth, with impact.",
        input=DepsIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/code/dependencies",
        run=_deps,
        read_only=True,
        errors="agrama",
    ),
    Operation(
        name="get_context",
        family="workspace",
        summary="Project, recent changes, sessions, performance, errors.",
        input=ContextIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/code/context",
        run=_context,
        read_only=True,
        errors="agrama",
    ),
    Operation(
        name="record_decision",
        family="workspace",
        summary="Record an agent's decision with its reasoning.",
        input=DecisionIn,
        output=Out,
        principals=WRITERS,
        method="POST",
        path="/code/decisions",
        run=_decision,
        errors="agrama",
    ),
    Operation(
        name="query_history",
        family="workspace",
        summary="A file's or decision's changes, with unified diffs.",
        input=HistoryIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/code/history",
        run=_history,
        read_only=True,
        errors="agrama",
    ),
    Operation(
        name="create_session",
        family="workspace",
        summary="Open a collaborative editing session on documents.",
        input=SessionIn,
        output=Out,
        principals=WRITERS,
        method="POST",
        path="/code/sessions",
        run=_session,
        errors="agrama",
    ),
    Operation(
        name="sync_document",
        family="workspace",
        summary="Apply CRDT operations from an agent; the merged text is saved.",
        input=SyncIn,
        output=Out,
        principals=WRITERS,
        method="POST",
        path="/code/sync",
        run=_sync,
        errors="agrama",
    ),
    Operation(
        name="get_performance_metrics",
        family="workspace",
        summary="Engram's own latency, throughput, memory and health.",
        input=MetricsIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/code/metrics",
        run=_metrics,
        read_only=True,
        errors="agrama",
    ),
)
