"""Knowledge family's operations: Spectron's upload / knowledge_search / knowledge_get, Cortex's knowledge_* tools,
Vectros' document_*, folder_*, hybrid_search and rag_ask — one module per part of the family."""

# declaration order is tools/list order: ingest, read and change, search and answers, containers
from engram.families.knowledge.operations import ingest, documents, search, containers  # noqa: I001

__all__ = ["containers", "documents", "ingest", "search"]
