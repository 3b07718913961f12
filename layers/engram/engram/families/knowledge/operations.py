"""Knowledge family: Spectron's upload / knowledge_search / knowledge_get, Cortex's knowledge_* tools,
Vectros' document_*, folder_*, hybrid_search and rag_ask."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engram.errors import Forbidden, InvalidInput
from engram.families.knowledge import KnowledgeServices
from engram.families.knowledge.documents import MAX_DOCUMENT_BYTES, NewDocument
from engram.families.knowledge.search import Search
from engram.identity import ANY, WRITERS, Caller
from engram.limits import Bounded
from engram.operation import (
    Metadata,
    Operation,
    OpInput,
    Passthrough,
    Scalar,
    Selector,
    Short,
    Stamp,
    declare,
    declare_all,
)
from engram.ports import Progress

Meta = Metadata
MetaFilter = Annotated[dict[str, Scalar | Annotated[list[Scalar], Field(max_length=100)]], Bounded("filter")]
"""A metadata filter: each key's value, or any of a list of values (scalars: what metadata is matched on)."""
MAX_TEXT = 2_000_000
Strategy = Literal["fixed", "sentence", "paragraph", "semantic"]
SENSITIVE = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".env",
    "id_rsa",
    "id_ed25519",
    "credentials",
    ".netrc",
    ".pem",
    ".key",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "shadow",
    "passwd",
)


class Out(Passthrough):
    """Outputs carry the service's dict through; the declared fields are the documented minimum."""

    traceId: str = ""


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


def _upload(s: KnowledgeServices, c: Caller, a: UploadIn, p: Progress) -> dict[str, Any]:
    new = NewDocument(
        base64.b64decode(a.bytes_base64),
        title=a.title or "",
        source=a.source or "",
        mime_type=a.mime_type,
        filename=a.filename,
        collection=a.collection,
        labels=a.labels,
        scopes=a.scopes,
        external_id=a.external_id,
    )
    return s.documents.ingest(c, new)


declare(
    Operation(
        "document_upload",
        "knowledge",
        "Upload a file (base64): PDF, DOCX, HTML, Markdown, text.",
        UploadIn,
        UploadOut,
        WRITERS,
        "POST",
        "/documents",
        _upload,
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


def _ingest(s: KnowledgeServices, c: Caller, a: IngestIn, p: Progress) -> dict[str, Any]:
    return s.documents.ingest(c, _new_text(a, a.collection, a.scopes, a))


declare(
    Operation(
        "knowledge_ingest",
        "knowledge",
        "Ingest a text document into a collection.",
        IngestIn,
        IngestOut,
        WRITERS,
        "POST",
        "/knowledge/ingest",
        _ingest,
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


def _bulk(s: KnowledgeServices, c: Caller, a: BulkIn, p: Progress) -> dict[str, Any]:
    docs = [_new_text(d, a.collection, a.scopes, a) for d in a.documents]
    return {"collection": a.collection, **s.documents.bulk_ingest(c, docs, p)}


declare(
    Operation(
        "knowledge_bulk_ingest",
        "knowledge",
        "Ingest many text documents; errors reported per document.",
        BulkIn,
        BulkOut,
        WRITERS,
        "POST",
        "/knowledge/bulk",
        _bulk,
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


def _jailed(s: KnowledgeServices, path: str) -> Path:
    root = Path(s.root.settings.ingest_root or Path.cwd()).resolve()
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


def _doc_ingest(s: KnowledgeServices, c: Caller, a: DocIngestIn, p: Progress) -> dict[str, Any]:
    if a.filePath is not None:
        if c.transport != "stdio":
            raise InvalidInput("filePath is only accepted over stdio; send text inline", code="file_path_http")
        path = _jailed(s, a.filePath)
        data, filename, mime = path.read_bytes(), path.name, a.mimeType
    else:
        data, filename, mime = (a.text or "").encode(), None, a.mimeType or "text/plain"
    new = NewDocument(
        data,
        title=a.title or filename or "",
        source=filename or "",
        mime_type=mime,
        filename=filename,
        collection=a.collection,
        folder_id=a.folderId,
        metadata=a.metadata or {},
        scopes=a.scopes,
        external_id=a.externalId,
        schema_id=a.schemaId,
        payload=a.payload,
        doc_type=a.type,
    )
    out = s.documents.ingest(c, new)
    return dict(out, indexStatus=_vectros_status(out["status"]))


def _vectros_status(status: str) -> str:
    return {"queued": "PENDING_INDEX", "indexed": "INDEXED", "failed": "FAILED"}.get(status, status.upper())


declare(
    Operation(
        "document_ingest",
        "knowledge",
        "Create a document from text (or filePath on stdio); idempotent by externalId.",
        DocIngestIn,
        UploadOut,
        WRITERS,
        "POST",
        "/documents/ingest",
        _doc_ingest,
    )
)

# -- read, change ------------------------------------------------------------------------------


class DocIdIn(OpInput):
    id: str = Field(..., min_length=1, max_length=128)


class DocGetIn(DocIdIn):
    includeText: bool = False
    includeDownloadUrl: bool = False


def _doc_get(s: KnowledgeServices, c: Caller, a: DocGetIn, p: Progress) -> dict[str, Any]:
    out = s.documents.get(c, a.id, a.includeText, a.includeDownloadUrl)
    return dict(out, indexStatus=_vectros_status(out["status"]))


declare(
    Operation(
        "document_get",
        "knowledge",
        "Fetch a document: metadata, status, optional text and download URL.",
        DocGetIn,
        Out,
        ANY,
        "GET",
        "/documents/{id}",
        _doc_get,
        read_only=True,
    )
)


class ChunksIn(DocIdIn):
    cursor: Short | None = None
    limit: int = Field(50, ge=1, le=500)


def _chunks(s: KnowledgeServices, c: Caller, a: ChunksIn, p: Progress) -> dict[str, Any]:
    return s.documents.chunks(c, a.id, a.cursor, a.limit)


declare(
    Operation(
        "document_chunks",
        "knowledge",
        "List a document's chunks (paginated).",
        ChunksIn,
        Out,
        ANY,
        "GET",
        "/documents/{id}/chunks",
        _chunks,
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


def _doc_update(s: KnowledgeServices, c: Caller, a: DocUpdateIn, p: Progress) -> dict[str, Any]:
    changes = {
        "text": a.text,
        "title": a.title,
        "metadata": a.metadata,
        "labels": a.labels,
        "folder_id": a.folderId,
        "type": a.type,
    }
    return s.documents.update(c, a.id, changes, a.expectedVersion)


declare(
    Operation(
        "document_update",
        "knowledge",
        "Update a document (new version; re-indexes only it).",
        DocUpdateIn,
        Out,
        WRITERS,
        "PATCH",
        "/documents/{id}",
        _doc_update,
    )
)


def _doc_delete(s: KnowledgeServices, c: Caller, a: DocIdIn, p: Progress) -> dict[str, Any]:
    return s.documents.delete(c, a.id)


declare(
    Operation(
        "document_delete",
        "knowledge",
        "Delete a document; it leaves search at once.",
        DocIdIn,
        Out,
        WRITERS,
        "DELETE",
        "/documents/{id}",
        _doc_delete,
    )
)


class DocQueryIn(OpInput):
    field: str = Field("created_at", max_length=128, description="title, created_at, externalId, type, payload.<f>")
    op: Literal["exact", "range", "prefix", "list"] = "list"
    value: Scalar | None = Field(None, description="exact / prefix")
    from_: Scalar | None = Field(None, alias="from", description="range low")
    to: Scalar | None = Field(None, description="range high")
    order: Literal["asc", "desc"] = "asc"
    limit: int = Field(20, ge=1, le=100)
    offset: int = Field(0, ge=0)
    collection: Short | None = None
    folderId: Short | None = None
    type: Short | None = None


def _field(doc: dict[str, Any], name: str) -> Any:
    if name.startswith("payload."):
        return (doc.get("payload") or {}).get(name[8:])
    return doc.get({"externalId": "external_id", "folderId": "folder_id"}.get(name, name))


def _typed_lookup(s: KnowledgeServices, c: Caller, a: DocQueryIn) -> dict[str, Any] | None:
    """A lookup on a typed document's lookup field (payload.<f> of its schema): a key range, not a scan."""
    if a.type is None or a.op == "list" or a.collection is not None or a.folderId is not None:
        return None
    schema = s.schemas.find(c.context_id, a.type)
    name = a.field[8:] if a.field.startswith("payload.") else None
    if (
        name is None
        or schema is None
        or schema.surface != "document"
        or not any(lk.field == name for lk in schema.lookups)
    ):
        return None
    items, _ = s.documents.lookup(
        c, a.type, name, a.op, a.value, a.from_, a.to, a.order == "desc", a.offset + a.limit + 1, None
    )
    page = items[a.offset : a.offset + a.limit]
    more = len(items) > a.offset + a.limit
    return {
        "items": page,
        "total": len(items) if not more else None,
        "nextOffset": a.offset + a.limit if more else None,
    }


def _doc_query(s: KnowledgeServices, c: Caller, a: DocQueryIn, p: Progress) -> dict[str, Any]:
    typed = _typed_lookup(s, c, a)
    if typed is not None:
        return typed
    docs = s.documents.all_documents(c)
    for key, want in (("collection", a.collection), ("folder_id", a.folderId), ("type", a.type)):
        if want is not None:
            docs = [d for d in docs if d.get(key) == want]
    if a.op == "exact":
        docs = [d for d in docs if _field(d, a.field) == a.value]
    elif a.op == "prefix":
        docs = [d for d in docs if str(_field(d, a.field) or "").startswith(str(a.value or ""))]
    elif a.op == "range":
        docs = [
            d
            for d in docs
            if _field(d, a.field) is not None
            and (a.from_ is None or _field(d, a.field) >= a.from_)
            and (a.to is None or _field(d, a.field) <= a.to)
        ]
    docs.sort(key=lambda d: (str(_field(d, a.field)), d["id"]), reverse=a.order == "desc")
    page = docs[a.offset : a.offset + a.limit]
    more = a.offset + a.limit < len(docs)
    return {"items": page, "total": len(docs), "nextOffset": a.offset + a.limit if more else None}


declare(
    Operation(
        "document_query",
        "knowledge",
        "Look up documents (exact / range / prefix on a field), paginated.",
        DocQueryIn,
        Out,
        ANY,
        "POST",
        "/documents/lookup",
        _doc_query,
        read_only=True,
    )
)

# -- search and answers -----------------------------------------------------------------------


class SearchIn(OpInput):
    query: str = Field(..., min_length=1, max_length=4000)
    mode: Literal["vector", "bm25", "fts", "hybrid", "hybrid_graph"] = "hybrid"
    k: int | None = Field(None, ge=1, le=100, description="Spectron: results (default 5)")
    limit: int | None = Field(None, ge=1, le=100, description="Cortex: results")
    threshold: float | None = Field(None, ge=0, le=1, description="min score (0-1; 0.5 = a match)")
    filter: Annotated[dict[str, list[Short]], Bounded("filter")] | None = Field(
        None, description="by mime_type, type, collection"
    )
    metadata_filter: MetaFilter | None = None
    collection: Short | None = None
    lens: Selector | None = None


SPECTRON_K, CORTEX_LIMIT = 5, 10  # each seed's default number of results


def _cortex_call(a: SearchIn) -> bool:
    """Whether a call follows Cortex's dialect (its own arguments or mode name); else Spectron's, whose
    default it then gets. A call with only a query is Spectron's."""
    return a.limit is not None or a.mode == "fts" or a.metadata_filter is not None or a.collection is not None


def _search(s: KnowledgeServices, c: Caller, a: SearchIn, p: Progress) -> dict[str, Any]:
    mode = "bm25" if a.mode == "fts" else "hybrid" if a.mode == "hybrid_graph" else a.mode
    k = a.k or a.limit or (CORTEX_LIMIT if _cortex_call(a) else SPECTRON_K)
    filt = a.filter or {}
    unknown = set(filt) - {"mime_type", "type", "collection"}
    if unknown:
        raise InvalidInput(f"unknown filter key(s): {', '.join(sorted(unknown))}")
    collection = a.collection or next(iter(filt.get("collection") or []), None)
    doc_type = next(iter(filt.get("type") or []), None)
    q = Search(
        a.query,
        mode,
        k,
        threshold=a.threshold,
        collection=collection,
        doc_type=doc_type,
        mime_types=filt.get("mime_type"),
        metadata=a.metadata_filter or {},
        lens=a.lens,
    )
    out: dict[str, Any] = s.documents.search(c, q)
    if a.mode == "hybrid_graph":
        out["results"] = s.documents.expand_neighbours(c, out["results"], k)
    out["search_mode"] = a.mode
    return out


declare(
    Operation(
        "knowledge_search",
        "knowledge",
        "Search documents: hybrid, vector or bm25; cited chunks.",
        SearchIn,
        Out,
        ANY,
        "POST",
        "/query",
        _search,
        read_only=True,
        also=("/documents/query",),
    )
)


class VectrosFilters(OpInput):
    """The retrieval filters hybrid_search and rag_ask share."""

    folderId: Short | None = None
    type: Short | None = None
    metadataFilters: MetaFilter | None = None
    dateFrom: Stamp | None = Field(None, description="ISO 8601")
    dateTo: Stamp | None = Field(None, description="ISO 8601")
    collection: Short | None = None

    def search(self, query: str, k: int, **extra: Any) -> Search:
        return Search(
            query,
            k=k,
            collection=self.collection,
            folder_id=self.folderId,
            doc_type=self.type,
            metadata=self.metadataFilters or {},
            created_from=self.dateFrom,
            created_to=self.dateTo,
            kinds=("chunk", "record"),  # "across indexed documents and records"
            **extra,
        )


AGRAMA_ARGS = ("context_files", "max_results", "include_semantic", "include_graph", "semantic_weight",
               "lexical_weight", "graph_weight")  # fmt: skip
VECTROS_ARGS = ("limit", "offset", "keywordPrecision", "minScore", "ownership", "folderId", "type",
                "metadataFilters", "dateFrom", "dateTo", "collection")  # fmt: skip


class HybridIn(VectrosFilters):
    """Vectros' arguments search the documents and records; Agrama's (context_files, max_results, the
    weights) search the code workspace. A call takes one seed's arguments, not both."""

    query: str = Field(..., min_length=1, max_length=4000)
    limit: int = Field(10, ge=1, le=50)
    offset: int = Field(0, ge=0, le=1000)
    keywordPrecision: Literal["any", "all"] = "any"
    minScore: float | None = Field(None, ge=0, le=1, description="min score (0-1; 0.5 = a match)")
    ownership: Selector | None = Field(None, description="DNF scope selector of owners")
    context_files: list[str] = Field([], max_length=50, description="Agrama: files for graph proximity")
    max_results: int = Field(10, ge=1, le=100, description="Agrama: results")
    include_semantic: bool = True
    include_graph: bool = True
    semantic_weight: float = Field(0.4, ge=0, le=1)
    lexical_weight: float = Field(0.4, ge=0, le=1)
    graph_weight: float = Field(0.2, ge=0, le=1)

    @model_validator(mode="after")
    def _one_dialect(self) -> HybridIn:
        agrama = sorted(self.model_fields_set & set(AGRAMA_ARGS))
        vectros = sorted(self.model_fields_set & set(VECTROS_ARGS))
        if agrama and vectros:
            raise ValueError(
                f"mixes Agrama's arguments ({', '.join(agrama)}: code workspace search) with Vectros' "
                f"({', '.join(vectros)}: document and record search); give one seed's"
            )
        return self

    @property
    def agrama(self) -> bool:
        return bool(self.model_fields_set & set(AGRAMA_ARGS))


def _hybrid_search(s: KnowledgeServices, c: Caller, a: HybridIn, p: Progress) -> dict[str, Any]:
    if a.agrama:
        return s.codeviews.hybrid(c, a)
    q = a.search(
        a.query, a.limit, offset=a.offset, threshold=a.minScore, lens=a.ownership, match_all=a.keywordPrecision == "all"
    )
    out: dict[str, Any] = s.documents.search(c, q)
    return dict(out, offset=a.offset, limit=a.limit)


class RagIn(VectrosFilters):
    question: str = Field(..., min_length=1, max_length=4000)
    limit: int = Field(5, ge=1, le=50, description="Passages to retrieve")
    instructions: str | None = Field(None, max_length=4000)
    temperature: float = Field(0.0, ge=0, le=1)


class AnswerOut(Out):
    answer: str
    citations: list[dict[str, Any]]


def _rag(s: KnowledgeServices, c: Caller, a: RagIn, p: Progress) -> dict[str, Any]:
    q = a.search(a.question, a.limit)
    return s.documents.ask(c, a.question, q, a.instructions, a.temperature, p)


declare_all(
    Operation("hybrid_search", "knowledge", "Keyword + dense search: documents and records (Vectros' arguments), "
              "or code (Agrama's).",
              HybridIn, Out, ANY, "POST", "/search", _hybrid_search, read_only=True, mcp_limits={"limit": (3, 10)},
              mcp_limits_unless=AGRAMA_ARGS),
    Operation("rag_ask", "knowledge", "Answer a question from the indexed corpus, with citations.",
              RagIn, AnswerOut, ANY, "POST", "/ask", _rag, read_only=True, mcp_limits={"limit": (5, 10)}),
)  # fmt: skip


class DocAskIn(DocIdIn):
    question: str = Field(..., min_length=1, max_length=4000)
    instructions: str | None = Field(None, max_length=4000)
    temperature: float = Field(0.0, ge=0, le=1)


def _doc_ask(s: KnowledgeServices, c: Caller, a: DocAskIn, p: Progress) -> dict[str, Any]:
    s.documents.get(c, a.id)  # 404 for an unknown or invisible document
    q = Search(a.question, k=5, document_id=a.id)
    return s.documents.ask(c, a.question, q, a.instructions, a.temperature, p)


declare(
    Operation(
        "document_ask",
        "knowledge",
        "Answer a question from one document, with citations.",
        DocAskIn,
        AnswerOut,
        ANY,
        "POST",
        "/documents/{id}/ask",
        _doc_ask,
        read_only=True,
    )
)


class GetIn(OpInput):
    kind: Literal["document", "chunk", "chunks", "node"] = "document"
    id: str | None = Field(None, max_length=256)
    node: Annotated[dict[str, Short], Bounded("filter")] | None = Field(None, description="kind and slug")
    cursor: Short | None = None
    limit: int = Field(50, ge=1, le=500)


def _get(s: KnowledgeServices, c: Caller, a: GetIn, p: Progress) -> dict[str, Any]:
    if a.kind == "node":
        if not a.node or not a.node.get("kind") or not a.node.get("slug"):
            raise InvalidInput("kind=node needs node.kind and node.slug")
        return s.documents.node(c, a.node["kind"], a.node["slug"])
    if not a.id:
        raise InvalidInput(f"kind={a.kind} needs id")
    if a.kind == "chunk" and "#" not in a.id:  # Spectron: a document's id with kind=chunk lists its chunks
        return {"kind": "chunk", **s.documents.chunks(c, a.id, a.cursor, a.limit)}
    if a.kind == "chunk":
        return {"kind": "chunk", **s.documents.chunk(c, a.id)}
    if a.kind == "chunks":
        return {"kind": "chunks", **s.documents.chunks(c, a.id, a.cursor, a.limit)}
    return {"kind": "document", **s.documents.get(c, a.id)}


declare(
    Operation(
        "knowledge_get",
        "knowledge",
        "Fetch a document, a chunk, a chunk list or a knowledge node by id.",
        GetIn,
        Out,
        ANY,
        "POST",
        "/knowledge/get",
        _get,
        read_only=True,
    )
)

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
        "knowledge_collections",
        "knowledge",
        "List, create, delete or get stats of collections.",
        CollectionsIn,
        Out,
        ANY,
        "POST",
        "/knowledge/collections",
        _collections,
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
        "folder_create",
        "knowledge",
        "Create a folder (optionally under a parent).",
        FolderIn,
        Out,
        WRITERS,
        "POST",
        "/folders",
        _folder_create,
    ),
    Operation(
        "folder_update",
        "knowledge",
        "Rename, move or describe a folder.",
        FolderUpdateIn,
        Out,
        WRITERS,
        "PATCH",
        "/folders/{id}",
        _folder_update,
    ),
    Operation(
        "folder_delete",
        "knowledge",
        "Delete an empty folder.",
        DocIdIn,
        Out,
        WRITERS,
        "DELETE",
        "/folders/{id}",
        _folder_delete,
    ),
    Operation(
        "folder_query",
        "knowledge",
        "List folders, by parent or name prefix (paginated).",
        FolderQueryIn,
        Out,
        ANY,
        "GET",
        "/folders",
        _folder_query,
        read_only=True,
    ),
)
