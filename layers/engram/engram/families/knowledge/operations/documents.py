"""Read and change documents: Vectros' document_get / chunks / update / delete / query."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from engram.families.knowledge import KnowledgeServices
from engram.families.knowledge.operations.common import MAX_TEXT, DocIdIn, Meta, Out, vectros_status
from engram.kernel.caller import ANY, WRITERS, Caller
from engram.kernel.operation import (
    Operation,
    Operations,
    OpInput,
    Scalar,
    Short,
)
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

# -- read, change ------------------------------------------------------------------------------


class DocGetIn(DocIdIn):
    includeText: bool = False
    includeDownloadUrl: bool = False


def _doc_get(services: KnowledgeServices, caller: Caller, args: DocGetIn, progress: Progress) -> dict[str, Any]:
    out = services.documents.get(caller, args.id, args.includeText, args.includeDownloadUrl)
    return dict(out, indexStatus=vectros_status(out["status"]))


OPERATIONS.declare(
    Operation(
        name="document_get",
        family="knowledge",
        summary="Fetch a document: metadata, status, optional text and download URL.",
        input=DocGetIn,
        output=Out,
        principals=ANY,
        method="GET",
        path="/documents/{id}",
        run=_doc_get,
        read_only=True,
    )
)


class ChunksIn(DocIdIn):
    cursor: Short | None = None
    limit: int = Field(50, ge=1, le=500)


def _chunks(services: KnowledgeServices, caller: Caller, args: ChunksIn, progress: Progress) -> dict[str, Any]:
    return services.documents.chunks(caller, args.id, args.cursor, args.limit)


OPERATIONS.declare(
    Operation(
        name="document_chunks",
        family="knowledge",
        summary="List a document's chunks (paginated).",
        input=ChunksIn,
        output=Out,
        principals=ANY,
        method="GET",
        path="/documents/{id}/chunks",
        run=_chunks,
        read_only=True,
    )
)


class DocUpdateIn(DocIdIn):
    text: str | None = Field(None, min_length=1, max_length=MAX_TEXT)
    title: str | None = Field(None, max_length=500)
    metadata: Meta | None = None
    labels: list[Short] | None = Field(None, max_length=50)
    folderId: Short | None = None
    type: Short | None = None
    expectedVersion: int | None = Field(None, ge=1)


def _doc_update(services: KnowledgeServices, caller: Caller, args: DocUpdateIn, progress: Progress) -> dict[str, Any]:
    changes = {
        "text": args.text,
        "title": args.title,
        "metadata": args.metadata,
        "labels": args.labels,
        "folder_id": args.folderId,
        "type": args.type,
    }
    return services.documents.update(caller, args.id, changes, args.expectedVersion)


OPERATIONS.declare(
    Operation(
        name="document_update",
        family="knowledge",
        summary="Update a document (new version; re-indexes only it).",
        input=DocUpdateIn,
        output=Out,
        principals=WRITERS,
        method="PATCH",
        path="/documents/{id}",
        run=_doc_update,
    )
)


def _doc_delete(services: KnowledgeServices, caller: Caller, args: DocIdIn, progress: Progress) -> dict[str, Any]:
    return services.documents.delete(caller, args.id)


OPERATIONS.declare(
    Operation(
        name="document_delete",
        family="knowledge",
        summary="Delete a document; it leaves search at once.",
        input=DocIdIn,
        output=Out,
        principals=WRITERS,
        method="DELETE",
        path="/documents/{id}",
        run=_doc_delete,
    )
)


class DocQueryIn(OpInput):
    field: str = Field("created_at", max_length=128, description="title, created_at, externalId, type, payload.<f>")
    op: Literal["exact", "range", "prefix", "list"] | None = Field(
        None, description="default: exact with a value, range with from / to, else list (as record_query)"
    )
    value: Scalar | None = Field(None, description="exact / prefix")
    from_: Scalar | None = Field(None, alias="from", description="range low")
    to: Scalar | None = Field(None, description="range high")
    order: Literal["asc", "desc"] = "asc"
    limit: int = Field(20, ge=1, le=100)
    offset: int = Field(0, ge=0)
    collection: Short | None = None
    folderId: Short | None = None
    type: Short | None = None

    @model_validator(mode="after")
    def _shape(self) -> DocQueryIn:
        """A `field` + `value` without `op` is an exact lookup, as `record_query`'s (it listed every document)."""
        if self.op is None:
            self.op = (
                "exact" if self.value is not None else "range" if (self.from_, self.to) != (None, None) else "list"
            )
        if self.op in ("exact", "prefix") and self.value is None:
            raise ValueError(f"op {self.op} needs a value")
        return self


def _field(doc: dict[str, Any], name: str) -> Any:
    if name.startswith("payload."):
        return (doc.get("payload") or {}).get(name[8:])
    return doc.get({"externalId": "external_id", "folderId": "folder_id"}.get(name, name))


def _in_range(value: Any, low: Any, high: Any) -> bool:
    """Whether `value` lies between the bounds given. A bound of another kind than the value (a number against
    a date, a string against a number: a 500 before) is never met; nor is a value that is not a scalar."""

    def kind(v: Any) -> str:
        return "bool" if isinstance(v, bool) else "number" if isinstance(v, int | float) else type(v).__name__

    if value is None or kind(value) not in ("bool", "number", "str"):
        return False
    above = low is None or (kind(low) == kind(value) and value >= low)
    return above and (high is None or (kind(high) == kind(value) and value <= high))


def _typed_lookup(services: KnowledgeServices, caller: Caller, args: DocQueryIn) -> dict[str, Any] | None:
    """A lookup on a typed document's lookup field (payload.<f> of its schema): a key range, not a scan."""
    if args.type is None or args.op == "list" or args.collection is not None or args.folderId is not None:
        return None
    schema = services.schemas.find(caller.context_id, args.type)
    name = args.field[8:] if args.field.startswith("payload.") else None
    if (
        name is None
        or schema is None
        or schema.surface != "document"
        or not any(lk.field == name for lk in schema.lookups)
    ):
        return None
    items, _ = services.documents.lookup(caller, args.type, name, args.op, args.value, args.from_, args.to,
                                         args.order == "desc", args.offset + args.limit + 1, None)  # fmt: skip
    page = items[args.offset : args.offset + args.limit]
    more = len(items) > args.offset + args.limit
    return {
        "items": page,
        "total": len(items) if not more else None,
        "nextOffset": args.offset + args.limit if more else None,
    }


def _doc_query(services: KnowledgeServices, caller: Caller, args: DocQueryIn, progress: Progress) -> dict[str, Any]:
    typed = _typed_lookup(services, caller, args)
    if typed is not None:
        return typed
    docs = services.documents.all_documents(caller)
    for key, want in (("collection", args.collection), ("folder_id", args.folderId), ("type", args.type)):
        if want is not None:
            docs = [d for d in docs if d.get(key) == want]
    if args.op == "exact":
        docs = [d for d in docs if _field(d, args.field) == args.value]
    elif args.op == "prefix":
        docs = [d for d in docs if str(_field(d, args.field) or "").startswith(str(args.value or ""))]
    elif args.op == "range":
        docs = [d for d in docs if _in_range(_field(d, args.field), args.from_, args.to)]
    docs.sort(key=lambda d: (str(_field(d, args.field)), d["id"]), reverse=args.order == "desc")
    page = docs[args.offset : args.offset + args.limit]
    more = args.offset + args.limit < len(docs)
    return {"items": page, "total": len(docs), "nextOffset": args.offset + args.limit if more else None}


OPERATIONS.declare(
    Operation(
        name="document_query",
        family="knowledge",
        summary="Look up documents (exact / range / prefix on a field), paginated.",
        input=DocQueryIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/documents/lookup",
        run=_doc_query,
        read_only=True,
    )
)
