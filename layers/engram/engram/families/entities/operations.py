"""Entities family: Cortex's `entity_*` tools over the graph memory extracts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engram.families.entities import EntitiesServices
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.operation import Metadata, Operation, Operations, OpInput
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

ID = Field(..., min_length=1, max_length=300)
TYPE = Field(None, min_length=1, max_length=64)


class SourceOut(BaseModel):
    """Where an entity or an edge was read: a document, a message (with its thread), a record, a memory turn."""

    model_config = ConfigDict(extra="allow")
    kind: str
    id: str


class EntityOut(BaseModel):
    id: str
    name: str
    type: str
    aliases: list[str]
    description: str
    mention_count: int
    metadata: dict[str, Any]
    created_at: str | None = None
    sources: list[SourceOut] = []


class QueryIn(OpInput):
    name: str = Field(..., min_length=1, max_length=300, description="name or alias")
    type: str | None = TYPE


class QueryOut(BaseModel):
    entity: EntityOut


def _query(services: EntitiesServices, caller: Caller, args: QueryIn, progress: Progress) -> dict[str, Any]:
    return services.entities.query(caller, args.name, args.type)


OPERATIONS.declare(
    Operation(
        name="entity_query",
        family="entities",
        summary="Look up an entity by name or alias.",
        input=QueryIn,
        output=QueryOut,
        principals=ANY,
        method="GET",
        path="/entities/lookup",
        run=_query,
        read_only=True,
    )
)


class SearchIn(OpInput):
    query: str = Field(..., min_length=1, max_length=4000)
    type: str | None = TYPE
    limit: int = Field(10, ge=1, le=100)


class FoundOut(BaseModel):
    id: str
    name: str
    type: str
    score: float
    description: str
    aliases: list[str]


class SearchOut(BaseModel):
    results: list[FoundOut]


def _search(services: EntitiesServices, caller: Caller, args: SearchIn, progress: Progress) -> dict[str, Any]:
    return services.entities.search(caller, args.query, args.type, args.limit)


OPERATIONS.declare(
    Operation(
        name="entity_search",
        family="entities",
        summary="Search entities (name, aliases, description).",
        input=SearchIn,
        output=SearchOut,
        principals=ANY,
        method="POST",
        path="/entities/search",
        run=_search,
        read_only=True,
    )
)


class RelationshipsIn(OpInput):
    entity_id: str = ID
    direction: Literal["incoming", "outgoing", "both"] = "both"
    type: str | None = TYPE


class TargetOut(BaseModel):
    id: str
    name: str
    type: str


class RelationshipOut(BaseModel):
    id: str
    type: str
    direction: str
    target: TargetOut
    since: str | None = None
    evidence: list[SourceOut] = []


class RelationshipsOut(BaseModel):
    entity_id: str
    relationships: list[RelationshipOut]


def _relationships(
    services: EntitiesServices, caller: Caller, args: RelationshipsIn, progress: Progress
) -> dict[str, Any]:
    return services.entities.relationships(caller, args.entity_id, args.direction, args.type)


OPERATIONS.declare(
    Operation(
        name="entity_relationships",
        family="entities",
        summary="An entity's relationships.",
        input=RelationshipsIn,
        output=RelationshipsOut,
        principals=ANY,
        method="GET",
        path="/entities/relationships",
        run=_relationships,
        read_only=True,
    )
)


class UpdateIn(OpInput):
    entity_id: str = ID
    name: str | None = Field(None, min_length=1, max_length=300)
    description: str | None = Field(None, max_length=4000)
    metadata: Metadata | None = Field(None, description="merged into the entity's")


class UpdateOut(BaseModel):
    entity_id: str
    updated_fields: list[str]


def _update(services: EntitiesServices, caller: Caller, args: UpdateIn, progress: Progress) -> dict[str, Any]:
    return services.entities.update(caller, args.entity_id, args.name, args.description, args.metadata)


OPERATIONS.declare(
    Operation(
        name="entity_update",
        family="entities",
        summary="Update an entity's name, description or metadata.",
        input=UpdateIn,
        output=UpdateOut,
        principals=WRITERS,
        method="PATCH",
        path="/entities",
        run=_update,
    )
)


class MergeIn(OpInput):
    keep_id: str = ID
    remove_id: str = ID


class MergeOut(BaseModel):
    kept_entity_id: str
    removed_entity_id: str
    aliases_merged: int
    relationships_transferred: int


def _merge(services: EntitiesServices, caller: Caller, args: MergeIn, progress: Progress) -> dict[str, Any]:
    return services.entities.merge(caller, args.keep_id, args.remove_id)


OPERATIONS.declare(
    Operation(
        name="entity_merge",
        family="entities",
        summary="Merge a duplicate entity into another.",
        input=MergeIn,
        output=MergeOut,
        principals=WRITERS,
        method="POST",
        path="/entities/merge",
        run=_merge,
    )
)


class ListIn(OpInput):
    type: str | None = TYPE
    sort: Literal["name", "mention_count", "created_at"] = "name"
    limit: int = Field(20, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class ListedOut(BaseModel):
    id: str
    name: str
    type: str
    mention_count: int


class ListOut(BaseModel):
    entities: list[ListedOut]
    total: int
    has_more: bool


def _list(services: EntitiesServices, caller: Caller, args: ListIn, progress: Progress) -> dict[str, Any]:
    return services.entities.list(caller, args.type, args.sort, args.limit, args.offset)


OPERATIONS.declare(
    Operation(
        name="entity_list",
        family="entities",
        summary="List entities by type, sorted.",
        input=ListIn,
        output=ListOut,
        principals=ANY,
        method="GET",
        path="/entities",
        run=_list,
        read_only=True,
    )
)


class GraphIn(OpInput):
    type: str | None = TYPE
    limit: int = Field(500, ge=1, le=5000, description="Most-mentioned entities kept")


class GraphEdge(BaseModel):
    id: str
    source: str
    target: str
    type: str
    weight: int


class GraphOut(BaseModel):
    nodes: list[ListedOut]
    edges: list[GraphEdge]
    total_entities: int


def _graph(services: EntitiesServices, caller: Caller, args: GraphIn, progress: Progress) -> dict[str, Any]:
    return services.entities.graph(caller, args.type, args.limit)


OPERATIONS.declare(
    Operation(
        name="entity_graph",
        family="entities",
        summary="Entities and the edges between them, for a picture.",
        input=GraphIn,
        output=GraphOut,
        principals=ANY,
        method="GET",
        path="/graph",
        run=_graph,
        read_only=True,
    )
)
