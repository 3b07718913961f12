"""Search and answers: knowledge_search, hybrid_search, rag_ask, document_ask, knowledge_get."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from engram.families.knowledge import KnowledgeServices
from engram.families.knowledge.operations.common import DocIdIn, MetaFilter, Out
from engram.families.knowledge.search import Search
from engram.kernel.caller import ANY, Caller
from engram.kernel.clock import parse_time
from engram.kernel.errors import InvalidInput
from engram.kernel.limits import Bounded
from engram.kernel.operation import (
    Operation,
    Operations,
    OpInput,
    Selector,
    Short,
    Stamp,
    When,
)
from engram.kernel.ports import Progress
from engram.search.time_phrases import window_of

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)

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
    since: When | None = None
    until: When | None = None
    timezone: str | None = Field(None, max_length=64, description="IANA time zone")


SPECTRON_K, CORTEX_LIMIT = 5, 10  # each seed's default number of results


def _cortex_call(a: SearchIn) -> bool:
    """Whether a call follows Cortex's dialect (its own arguments or mode name); else Spectron's, whose
    default it then gets. A call with only a query is Spectron's."""
    return a.limit is not None or a.mode == "fts" or a.metadata_filter is not None or a.collection is not None


def _search(services: KnowledgeServices, caller: Caller, args: SearchIn, progress: Progress) -> dict[str, Any]:
    mode = "bm25" if args.mode == "fts" else "hybrid" if args.mode == "hybrid_graph" else args.mode
    k = args.k or args.limit or (CORTEX_LIMIT if _cortex_call(args) else SPECTRON_K)
    filt = args.filter or {}
    unknown = set(filt) - {"mime_type", "type", "collection"}
    if unknown:
        raise InvalidInput(f"unknown filter key(s): {', '.join(sorted(unknown))}")
    collection = args.collection or next(iter(filt.get("collection") or []), None)
    doc_type = next(iter(filt.get("type") or []), None)
    # a document tells of times in its own words ("in 1979", "today's libraries"): search matches them; when it was
    # added is chosen with since / until only
    when = window_of(
        args.query,
        services.root.clock.now(),
        args.timezone,
        parse_time(args.since),
        parse_time(args.until),
        phrases=False,
    )
    query, window = when
    low, high = window.bounds() if window is not None else (None, None)
    q = Search(
        query,
        mode,
        k,
        threshold=args.threshold,
        collection=collection,
        doc_type=doc_type,
        mime_types=filt.get("mime_type"),
        metadata=args.metadata_filter or {},
        lens=args.lens,
        created_from=low,
        created_to=high,
    )
    out: dict[str, Any] = services.documents.search(caller, q)
    if window is not None:
        out["time"] = window.said()
    if args.mode == "hybrid_graph":
        out["results"] = services.documents.expand_neighbours(caller, out["results"], k)
    out["search_mode"] = args.mode
    return out


OPERATIONS.declare(
    Operation(
        name="knowledge_search",
        family="knowledge",
        summary="Search documents (hybrid, vector, bm25): each document's best passage first, then more, up to k.",
        input=SearchIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/query",
        run=_search,
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


def _hybrid_search(services: KnowledgeServices, caller: Caller, args: HybridIn, progress: Progress) -> dict[str, Any]:
    if args.agrama:
        return services.codeviews.hybrid(caller, args)
    q = args.search(
        args.query,
        args.limit,
        offset=args.offset,
        threshold=args.minScore,
        lens=args.ownership,
        match_all=args.keywordPrecision == "all",
    )
    out: dict[str, Any] = services.documents.search(caller, q)
    return dict(out, offset=args.offset, limit=args.limit)


class RagIn(VectrosFilters):
    question: str = Field(..., min_length=1, max_length=4000)
    limit: int = Field(5, ge=1, le=50, description="Passages to retrieve")
    instructions: str | None = Field(None, max_length=4000)
    temperature: float = Field(0.0, ge=0, le=1)


class AnswerOut(Out):
    answer: str
    citations: list[dict[str, Any]]


def _rag(services: KnowledgeServices, caller: Caller, args: RagIn, progress: Progress) -> dict[str, Any]:
    q = args.search(args.question, args.limit)
    return services.documents.ask(caller, args.question, q, args.instructions, args.temperature, progress)


OPERATIONS.declare_all(
    Operation(
        name="hybrid_search",
        family="knowledge",
        summary="Keyword + dense search: documents (a hit each) and records (Vectros' arguments), or code (Agrama's).",
        input=HybridIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/search",
        run=_hybrid_search,
        read_only=True,
        mcp_limits={"limit": (3, 10)},
        mcp_limits_unless=AGRAMA_ARGS,
    ),
    Operation(
        name="rag_ask",
        family="knowledge",
        summary="Answer a question from the indexed corpus, with citations.",
        input=RagIn,
        output=AnswerOut,
        principals=ANY,
        method="POST",
        path="/ask",
        run=_rag,
        read_only=True,
        mcp_limits={"limit": (5, 10)},
    ),
)


class DocAskIn(DocIdIn):
    question: str = Field(..., min_length=1, max_length=4000)
    instructions: str | None = Field(None, max_length=4000)
    temperature: float = Field(0.0, ge=0, le=1)


def _doc_ask(services: KnowledgeServices, caller: Caller, args: DocAskIn, progress: Progress) -> dict[str, Any]:
    services.documents.get(caller, args.id)  # 404 for an unknown or invisible document
    q = Search(args.question, k=5, document_id=args.id)
    return services.documents.ask(caller, args.question, q, args.instructions, args.temperature, progress)


OPERATIONS.declare(
    Operation(
        name="document_ask",
        family="knowledge",
        summary="Answer a question from one document, with citations.",
        input=DocAskIn,
        output=AnswerOut,
        principals=ANY,
        method="POST",
        path="/documents/{id}/ask",
        run=_doc_ask,
        read_only=True,
    )
)


class GetIn(OpInput):
    kind: Literal["document", "chunk", "chunks", "node"] = "document"
    id: str | None = Field(None, max_length=256)
    node: Annotated[dict[str, Short], Bounded("filter")] | None = Field(None, description="kind and slug")
    cursor: Short | None = None
    limit: int = Field(50, ge=1, le=500)


def _get(services: KnowledgeServices, caller: Caller, args: GetIn, progress: Progress) -> dict[str, Any]:
    if args.kind == "node":
        if not args.node or not args.node.get("kind") or not args.node.get("slug"):
            raise InvalidInput("kind=node needs node.kind and node.slug")
        return services.documents.node(caller, args.node["kind"], args.node["slug"])
    if not args.id:
        raise InvalidInput(f"kind={args.kind} needs id")
    if args.kind == "chunk" and "#" not in args.id:  # Spectron: a document's id with kind=chunk lists its chunks
        return {"kind": "chunk", **services.documents.chunks(caller, args.id, args.cursor, args.limit)}
    if args.kind == "chunk":
        return {"kind": "chunk", **services.documents.chunk(caller, args.id)}
    if args.kind == "chunks":
        return {"kind": "chunks", **services.documents.chunks(caller, args.id, args.cursor, args.limit)}
    return {"kind": "document", **services.documents.get(caller, args.id)}


OPERATIONS.declare(
    Operation(
        name="knowledge_get",
        family="knowledge",
        summary="Fetch a document, a chunk, a chunk list or a knowledge node by id.",
        input=GetIn,
        output=Out,
        principals=ANY,
        method="POST",
        path="/knowledge/get",
        run=_get,
        read_only=True,
    )
)
