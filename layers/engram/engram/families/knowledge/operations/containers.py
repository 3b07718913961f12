"""Collections (Cortex) and folders (Vectros)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from engram.families.knowledge import KnowledgeServices
from engram.families.knowledge.operations.common import DocIdIn, Meta, Out
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.operation import (
    Operation,
    Operations,
    OpInput,
    Short,
)
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

# -- collections and folders ------------------------------------------------------------------


class CollectionsIn(OpInput):
    action: Literal["list", "create", "delete", "stats"]
    name: str | None = Field(None, min_length=1, max_length=128)
    description: str | None = Field(None, max_length=1000)
    force: bool = Field(False, description="delete: also delete the collection's documents")


def _collections(
    services: KnowledgeServices, caller: Caller, args: CollectionsIn, progress: Progress
) -> dict[str, Any]:
    if args.action != "list" and caller.principal.role not in WRITERS:
        raise caller.denied(
            f"knowledge_collections {args.action} needs principal agent or management",
            reason="principal_not_allowed",
            operation="knowledge_collections",
        )
    return services.documents.collections(caller, args.action, args.name, args.description, args.force)


OPERATIONS.declare(
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


def _folder_create(services: KnowledgeServices, caller: Caller, args: FolderIn, progress: Progress) -> dict[str, Any]:
    return services.documents.folder_create(caller, args.name, args.parentId, args.description, args.metadata)


def _folder_update(
    services: KnowledgeServices, caller: Caller, args: FolderUpdateIn, progress: Progress
) -> dict[str, Any]:
    changes = {
        "name": args.name,
        "parent_id": args.parentId,
        "description": args.description,
        "metadata": args.metadata,
    }
    return services.documents.folder_update(caller, args.id, changes)


def _folder_delete(services: KnowledgeServices, caller: Caller, args: DocIdIn, progress: Progress) -> dict[str, Any]:
    return services.documents.folder_delete(caller, args.id)


def _folder_query(
    services: KnowledgeServices, caller: Caller, args: FolderQueryIn, progress: Progress
) -> dict[str, Any]:
    folders = services.documents.folder_list(caller, args.parentId, args.prefix)
    page = folders[args.offset : args.offset + args.limit]
    return {
        "items": page,
        "total": len(folders),
        "nextOffset": args.offset + args.limit if args.offset + args.limit < len(folders) else None,
    }


OPERATIONS.declare_all(
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
