"""Knowledge family: documents (ingest, parse, chunk, embed), folders and collections, hybrid search and
answers with citations — Cortex's, Vectros' and Agrama's document tools."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from engram.kernel.family import Family, Job, Services
from engram.kernel.kinds import Kind
from engram.kernel.queue import BLOB_CREATED_JOB

if TYPE_CHECKING:
    from engram.families.knowledge.documents import DocumentService
    from engram.families.knowledge.erasing import KnowledgeErasing
    from engram.families.records.schemas import SchemaService
    from engram.families.workspace.views import CodeViews

EMBED_JOB = "documents.embed"
STAGED_JOB = "documents.staged_chunks"  # the net of chunks written ahead of their commit (`staging`)


class KnowledgeServices(Services):
    @cached_property
    def documents(self) -> DocumentService:
        from engram.families.knowledge.documents import DocumentService

        return DocumentService(self.root.kernel, self.schemas)

    @property
    def schemas(self) -> SchemaService:
        """The records family's schemas (a document's typed metadata)."""
        from engram.families.records import RecordsServices

        return self.root.services(RecordsServices).schemas

    @property
    def codeviews(self) -> CodeViews:
        """The workspace's code views (Agrama's hybrid_search over code)."""
        from engram.families.workspace import WorkspaceServices

        return self.root.services(WorkspaceServices).codeviews

    @cached_property
    def erasing(self) -> KnowledgeErasing:
        from engram.families.knowledge.erasing import KnowledgeErasing

        return KnowledgeErasing(self.root.kernel)


FAMILY = Family(
    "knowledge",
    KnowledgeServices,
    function="KnowledgeFunction",
    jobs={
        BLOB_CREATED_JOB: Job(lambda s: s.documents.blob_created_job),
        EMBED_JOB: Job(lambda s: s.documents.embed_job, batch=lambda s: s.documents.embed_jobs),
        STAGED_JOB: Job(lambda s: s.documents.staged_job),
    },
    kinds={
        "document": Kind("knowledge", "scoped", blobs=True),
        "folder": Kind("knowledge", "scoped"),
        "collection": Kind("knowledge", "scoped"),
        "chunk": Kind("knowledge", "via", "document", indexed=True),
        "docstate": Kind("knowledge", "via", "document"),
        "dlookup": Kind("knowledge", "via", "document"),
        "hash": Kind("knowledge", "system"),
        "extid": Kind("knowledge", "system"),
        "fence": Kind("knowledge", "system"),
    },
    seeds=("spectron", "cortex", "vectros", "agrama"),
    warm=("knowledge_collections", {"action": "list"}),
    clients=("dynamodb", "opensearch", "sqs", "s3"),
    eraser=lambda s: s.erasing.erase,
    reindexer=lambda s: s.erasing.reindex,
)
