"""Entities family: Cortex's `entity_*` tools over the graph memory extracts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engram.families.entities import EntitiesServices
from engram.identity import ANY, WRITERS, Caller
from engram.operation import Metadata, Operation, OpInput, declare
from engram.ports import Progress

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


def _query(s: EntitiesServices, c: Caller, a: QueryIn, p: Progress) -> dict[str, Any]:
    return s.entities.query(c, a.name, a.type)


declare(
    Operation(
        "entity_query", "entities", "Look up an entity by name or alias.", QueryIn, QueryOut, ANY, "GET",
        "/entities/lookup", _query, read_only=True,
    )
)  # fmt: skip


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


def _search(s: EntitiesServices, c: Caller, a: SearchIn, p: Progress) -> dict[str, Any]:
    return s.entities.search(c, a.query, a.type, a.limit)


declare(
    Operation(
        "entity_search", "entities", "Search entities (name, aliases, description).", SearchIn, SearchOut, ANY,
        "POST", "/entities/search", _search, read_only=True,
    )
)  # fmt: skip


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


def _relationships(s: EntitiesServices, c: Caller, a: RelationshipsIn, p: Progress) -> dict[str, Any]:
    return s.entities.relationships(c, a.entity_id, a.direction, a.type)


declare(
    Operation(
        "entity_relationships", "entities", "An entity's relationships.", RelationshipsIn, RelationshipsOut, ANY,
        "GET", "/entities/relationships", _relationships, read_only=True,
    )
)  # fmt: skip


class UpdateIn(OpInput):
    entity_id: str = ID
    name: str | None = Field(None, min_length=1, max_length=300)
    description: str | None = Field(None, max_length=4000)
    metadata: Metadata | None = Field(None, description="merged into the entity's")


class UpdateOut(BaseModel):
    entity_id: str
    updated_fields: list[str]


def _update(s: EntitiesServices, c: Caller, a: UpdateIn, p: Progress) -> dict[str, Any]:
    return s.entities.update(c, a.entity_id, a.name, a.description, a.metadata)


declare(
    Operation(
        "entity_update", "entities", "Update an entity's name, description or metadata.", UpdateIn, UpdateOut,
        WRITERS, "PATCH", "/entities", _update,
    )
)  # fmt: skip


class MergeIn(OpInput):
    keep_id: str = ID
    remove_id: str = ID


class MergeOut(BaseModel):
    kept_entity_id: str
    removed_entity_id: str
    aliases_merged: int
    relationships_transferred: int


def _merge(s: EntitiesServices, c: Caller, a: MergeIn, p: Progress) -> dict[str, Any]:
    return s.entities.merge(c, a.keep_id, a.remove_id)


declare(
    Operation(
        "entity_merge", "entities", "Merge a duplicate entity into another.", MergeIn, MergeOut, WRITERS, "POST",
        "/entities/merge", _merge,
    )
)  # fmt: skip


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


def _list(s: EntitiesServices, c: Caller, a: ListIn, p: Progress) -> dict[str, Any]:
    return s.entities.list(c, a.type, a.sort, a.limit, a.offset)


declare(
    Operation(
        "entity_list", "entities", "List entities by type, sorted.", ListIn, ListOut, ANY, "GET", "/entities", _list,
        read_only=True,
    )
)  # fmt: skip


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


def _graph(s: EntitiesServices, c: Caller, a: GraphIn, p: Progress) -> dict[str, Any]:
    return s.entities.graph(c, a.type, a.limit)


declare(
    Operation(
        "entity_graph", "entities", "Entities and the edges between them, for a picture.", GraphIn, GraphOut, ANY,
        "GET", "/graph", _graph, read_only=True,
    )
)  # fmt: skip
