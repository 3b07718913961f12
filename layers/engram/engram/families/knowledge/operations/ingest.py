"""Ingest: Spectron's upload, Cortex's knowledge_ingest / knowledge_bulk_ingest, Vectros' document_ingest."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engram.families.knowledge import KnowledgeServices
from engram.families.knowledge.documents import MAX_DOCUMENT_BYTES, NewDocument
from engram.families.knowledge.operations.common import MAX_TEXT, SENSITIVE, Meta, Out, Strategy, vectros_status
from engram.kernel.caller import WRITERS, Caller
from engram.kernel.errors import Forbidden, InvalidInput
from engram.kernel.limits import Bounded
from engram.kernel.operation import (
    Operation,
    Operations,
    OpInput,
    Selector,
    Short,
)
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

# -- ingest ------------------------------------------------------------------------------------


class UploadIn(OpInput):
    bytes_base64: str = Field(
        ..., min_length=1, max_length=MAX_DOCUMENT_BYTES * 4 // 3 + 4, description="The file, base64 (RFC 4648)"
    )
    title: str | None = Field(None, max_length=500)
    source: str | None = Field(None, max_length=1000)
    mime_type: str | None = Field(None, max_length=200)
    filename: str | None = Field(None, max_length=500)
    scopes: Selector | None = None
    labels: list[str] = Field(default_factory=list, max_length=50)
    collection: str | None = Field(None, max_length=128)
    external_id: str | None = Field(None, alias="externalId", max_length=256)

    @field_validator("bytes_base64")
    @classmethod
    def _b64(cls, v: str) -> str:
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("not valid base64 (RFC 4648)") from exc
        return v


class UploadOut(Out):
    id: str
    status: str
    content_hash: str
    deduplicated: bool
    version: int


def _upload(services: KnowledgeServices, caller: Caller, args: UploadIn, progress: Progress) -> dict[str, Any]:
    new = NewDocument(
        base64.b64decode(args.bytes_base64),
        title=args.title or "",
        source=args.source or "",
        mime_type=args.mime_type,
        filename=args.filename,
        collection=args.collection,
        labels=args.labels,
        scopes=args.scopes,
        external_id=args.external_id,
    )
    return services.documents.ingest(caller, new)


OPERATIONS.declare(
    Operation(
        name="document_upload",
        family="knowledge",
        summary="Upload a file (base64): PDF, DOCX, HTML, Markdown, text.",
        input=UploadIn,
        output=UploadOut,
        principals=WRITERS,
        method="POST",
        path="/documents",
        run=_upload,
    )
)


class ChunkOpts(BaseModel):
    chunk_strategy: Strategy = "paragraph"
    chunk_max_tokens: int = Field(256, ge=32, le=2048)
    chunk_overlap: int = Field(32, ge=0, le=512)


class IngestIn(OpInput, ChunkOpts):
    collection: str = Field(..., min_length=1, max_length=128)
    title: str = Field(..., max_length=500)
    content: str = Field(..., min_length=1, max_length=MAX_TEXT)
    source_url: str | None = Field(None, max_length=2000)
    metadata: Meta | None = None
    scopes: Selector | None = None


class IngestOut(Out):
    document_id: str
    collection: str
    chunks_created: int
    total_tokens: int
    status: str


def _new_text(a: Any, collection: str, scopes: Selector | None, opts: ChunkOpts) -> NewDocument:
    return NewDocument(
        a.content.encode(),
        title=a.title,
        source=a.source_url or "",
        source_url=a.source_url,
        mime_type="text/plain",
        collection=collection,
        metadata=a.metadata or {},
        scopes=scopes,
        strategy=opts.chunk_strategy,
        max_tokens=opts.chunk_max_tokens,
        overlap=opts.chunk_overlap,
    )


def _ingest(services: KnowledgeServices, caller: Caller, args: IngestIn, progress: Progress) -> dict[str, Any]:
    return services.documents.ingest(caller, _new_text(args, args.collection, args.scopes, args))


OPERATIONS.declare(
    Operation(
        name="knowledge_ingest",
        family="knowledge",
        summary="Ingest a text document into a collection.",
        input=IngestIn,
        output=IngestOut,
        principals=WRITERS,
        method="POST",
        path="/knowledge/ingest",
        run=_ingest,
    )
)


class BulkDoc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(..., max_length=500)
    content: str = Field(..., max_length=MAX_TEXT)
    source_url: str | None = Field(None, max_length=2000)
    metadata: Meta | None = None


class BulkIn(OpInput, ChunkOpts):
    collection: str = Field(..., min_length=1, max_length=128)
    documents: list[BulkDoc] = Field(..., min_length=1, max_length=2000)
    scopes: Selector | None = None


class BulkOut(Out):
    collection: str
    documents_ingested: int
    total_chunks: int
    errors: list[dict[str, Any]]


def _bulk(services: KnowledgeServices, caller: Caller, args: BulkIn, progress: Progress) -> dict[str, Any]:
    docs = [_new_text(d, args.collection, args.scopes, args) for d in args.documents]
    return {"collection": args.collection, **services.documents.bulk_ingest(caller, docs, progress)}


OPERATIONS.declare(
    Operation(
        name="knowledge_bulk_ingest",
        family="knowledge",
        summary="Ingest many text documents; errors reported per document.",
        input=BulkIn,
        output=BulkOut,
        principals=WRITERS,
        method="POST",
        path="/knowledge/bulk",
        run=_bulk,
    )
)


class DocIngestIn(OpInput):
    text: str | None = Field(None, max_length=MAX_TEXT)
    filePath: str | None = Field(None, max_length=4096, description="stdio only")
    title: str | None = Field(None, max_length=500)
    externalId: str | None = Field(None, max_length=256, description="Idempotency key")
    schemaId: str | None = Field(None, max_length=128)
    payload: Annotated[dict[str, Any], Bounded("payload")] | None = None
    folderId: Short | None = None
    type: str | None = Field(None, max_length=128)
    mimeType: str | None = Field(None, max_length=200)
    metadata: Meta | None = None
    collection: str | None = Field(None, max_length=128)
    scopes: Selector | None = None

    @model_validator(mode="after")
    def _one_body(self) -> DocIngestIn:
        if (self.text is None) == (self.filePath is None):
            raise ValueError("pass exactly one of text or filePath")
        if self.payload is not None and not self.schemaId:
            raise ValueError("payload needs schemaId")
        return self


def _jailed(services: KnowledgeServices, path: str) -> Path:
    root = Path(services.root.settings.ingest_root or Path.cwd()).resolve()
    raw = Path(path)
    if raw.is_absolute() or ".." in raw.parts:
        raise Forbidden(f"{path}: outside the ingest root", code="path_refused")
    candidate = root / raw
    if any(part.lower().startswith(SENSITIVE) or part.lower().endswith(SENSITIVE) for part in raw.parts):
        raise Forbidden(f"{path}: sensitive file refused", code="path_refused")
    resolved = candidate.resolve()
    if candidate.is_symlink() or not resolved.is_relative_to(root):
        raise Forbidden(f"{path}: links out of the ingest root are refused", code="path_refused")
    if not resolved.is_file():
        raise InvalidInput(f"{path}: no such file")
    return resolved


def _doc_ingest(services: KnowledgeServices, caller: Caller, args: DocIngestIn, progress: Progress) -> dict[str, Any]:
    if args.filePath is not None:
        if caller.transport != "stdio":
            raise InvalidInput("filePath is only accepted over stdio; send text inline", code="file_path_http")
        path = _jailed(services, args.filePath)
        data, filename, mime = path.read_bytes(), path.name, args.mimeType
    else:
        data, filename, mime = (args.text or "").encode(), None, args.mimeType or "text/plain"
    new = NewDocument(
        data,
        title=args.title or filename or "",
        source=filename or "",
        mime_type=mime,
        filename=filename,
        collection=args.collection,
        folder_id=args.folderId,
        metadata=args.metadata or {},
        scopes=args.scopes,
        external_id=args.externalId,
        schema_id=args.schemaId,
        payload=args.payload,
        doc_type=args.type,
    )
    out = services.documents.ingest(caller, new)
    return dict(out, indexStatus=vectros_status(out["status"]))


OPERATIONS.declare(
    Operation(
        name="document_ingest",
        family="knowledge",
        summary="Create a document from text (or filePath on stdio); idempotent by externalId.",
        input=DocIngestIn,
        output=UploadOut,
        principals=WRITERS,
        method="POST",
        path="/documents/ingest",
        run=_doc_ingest,
    )
)
