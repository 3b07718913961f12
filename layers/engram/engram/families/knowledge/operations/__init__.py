"""Knowledge family's operations: Spectron's upload / knowledge_search / knowledge_get, Cortex's knowledge_* tools,
Vectros' document_*, folder_*, hybrid_search and rag_ask — one module per part of the family."""

# declaration order is tools/list order: ingest, read and change, search and answers, containers
from engram.families.knowledge.operations import ingest, documents, search, containers  # noqa: I001
from engram.kernel.operation import Operations

OPERATIONS = Operations()  # the family's, its parts' in this order (`engram.families.catalogue`)
for part in (ingest, documents, search, containers):
    OPERATIONS.extend(part.OPERATIONS)

__all__ = ["OPERATIONS", "containers", "documents", "ingest", "search"]
