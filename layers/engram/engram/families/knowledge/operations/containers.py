"""Collections (Cortex) and folders (Vectros)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from engram.families.knowledge import KnowledgeServices
from engram.families.knowledge.operations.common import DocIdIn, Meta, Out
from engram.identity import ANY, WRITERS, Caller
from engram.operation import (
    Operation,
    OpInput,
    Short,
    declare,
    declare_all,
)
from engram.ports import Progress

# -- collections and folders ------------------------------------------------------------------


class CollectionsIn(OpInput):
    action: Literal["list", "create", "delete", "stats"]
    name: str | None = Field(None, min_length=1, max_length=128)
    description: str | None = Field(None, max_length=1000)
    force: bool = Field(False, description="delete: also delete the collection's documents")


def _collections(s: KnowledgeServices, c: Caller, a: CollectionsIn, p: Progress) -> dict[str, Any]:
    if a.action != "list" and c.principal.role not in WRITERS:
        raise c.denied(
            f"knowledge_collections {a.action} needs principal agent or management",
            reason="principal_not_allowed",
            operation="knowledge_collections",
        )
    return s.documents.collections(c, a.action, a.name, a.description, a.force)


declare(
    Operation(
        name="knowledge_collections",
        family="knowledge",
        summary="List, create, delete or get stats of collections.",
        input=CollectionsIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/knowledge/collections",
        run=_collections,
        reads_when=lambda a: a.action in ("list", "stats"),
    )
)


class FolderIn(OpInput):
    name: str = Field(..., min_length=1, max_length=256)
    parentId: Short | None = None
    description: str | None = Field(None, max_length=1000)
    metadata: Meta | None = None


class FolderUpdateIn(OpInput):
    id: str = Field(..., min_length=1, max_length=128)
    name: str | None = Field(None, min_length=1, max_length=256)
    parentId: Short | None = None
    description: str | None = Field(None, max_length=1000)
    metadata: Meta | None = None


class FolderQueryIn(OpInput):
    parentId: Short | None = None
    prefix: str | None = Field(None, max_length=256)
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0)


def _folder_create(s: KnowledgeServices, c: Caller, a: FolderIn, p: Progress) -> dict[str, Any]:
    return s.documents.folder_create(c, a.name, a.parentId, a.description, a.metadata)


def _folder_update(s: KnowledgeServices, c: Caller, a: FolderUpdateIn, p: Progress) -> dict[str, Any]:
    changes = {"name": a.name, "parent_id": a.parentId, "description": a.description, "metadata": a.metadata}
    return s.documents.folder_update(c, a.id, changes)


def _folder_delete(s: KnowledgeServices, c: Caller, a: DocIdIn, p: Progress) -> dict[str, Any]:
    return s.documents.folder_delete(c, a.id)


def _folder_query(s: KnowledgeServices, c: Caller, a: FolderQueryIn, p: Progress) -> dict[str, Any]:
    folders = s.documents.folder_list(c, a.parentId, a.prefix)
    page = folders[a.offset : a.offset + a.limit]
    return {
        "items": page,
        "total": len(folders),
        "nextOffset": a.offset + a.limit if a.offset + a.limit < len(folders) else None,
    }


declare_all(
    Operation(
        name="folder_create",
        family="knowledge",
        summary="Create a folder (optionally under a parent).",
        input=FolderIn,
        output=Out,
        principals=WRITERS,
        method="POST",
        path="/folders",
        run=_folder_create,
    ),
    Operation(
        name="folder_update",
        family="knowledge",
        summary="Rename, move or describe a folder.",
        input=FolderUpdateIn,
        output=Out,
        principals=WRITERS,
        method="PATCH",
        path="/folders/{id}",
        run=_folder_update,
    ),
    Operation(
        name="folder_delete",
        family="knowledge",
        summary="Delete an empty folder.",
        input=DocIdIn,
        output=Out,
        principals=WRITERS,
        method="DELETE",
        path="/folders/{id}",
        run=_folder_delete,
    ),
    Operation(
        name="folder_query",
        family="knowledge",
        summary="List folders, by parent or name prefix (paginated).",
        input=FolderQueryIn,
        output=Out,
        principals=ANY,
        method="GET",
        path="/folders",
        run=_folder_query,
        read_only=True,
    ),
)
