"""What every part of the knowledge family's document service shares: the document's shape, its chunks'
ids and index documents, and reading a document as a caller may see it.

The service (`documents.DocumentService`) is one class made of parts, one module each: ingest and change
(`documents`), the embedding jobs (`embedding`), search and answers (`search`), collections and folders
(`folders`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from engram.families.knowledge.chunking import Chunk, Strategy
from engram.families.records.history import PRIVATE_DOCUMENT_FIELDS
from engram.families.records.schemas import SchemaService
from engram.kernel.caller import Caller
from engram.kernel.errors import NotFound
from engram.kernel.ports import IndexDoc, Item, Write, scan
from engram.kernel.scopes import can_see
from engram.kernel.services import BaseService, Kernel

MAX_DOCUMENT_BYTES = 20 * 1024 * 1024
INBOX = "inbox/"
DEFAULT_COLLECTION = "default"
LOOKUP = "dlookup"  # a typed document's lookup entries (engram.families.records.lookups)
_RETRIES = 3


@dataclass
class NewDocument:
    data: bytes
    title: str = ""
    source: str = ""
    source_url: str | None = None
    mime_type: str | None = None
    filename: str | None = None
    collection: str | None = None
    folder_id: str | None = None
    labels: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    scopes: list[list[str]] | None = None
    external_id: str | None = None
    schema_id: str | None = None
    payload: dict[str, Any] | None = None
    doc_type: str | None = None
    strategy: Strategy = "paragraph"
    max_tokens: int = 256
    overlap: int = 32


def _flat(value: Any) -> str | int | float | bool:
    return value if isinstance(value, str | int | float | bool) else str(value)


def chunk_prefix(doc: dict[str, Any]) -> str:
    """The prefix of the chunk ids of a document version (documents from before prefixes were recorded use
    `{id}#`)."""
    return str(doc.get("chunk_prefix") or doc["id"] + "#")


def chunk_ids(prefix: str, count: int) -> list[str]:
    """The ids of `count` chunks under `prefix`: the prefix, then the position."""
    return [f"{prefix}{position:05d}" for position in range(count)]


def chunk_key(doc: dict[str, Any], position: int) -> str:
    """A chunk's id: the prefix of the document version that made it, then the position."""
    return f"{chunk_prefix(doc)}{position:05d}"


class DocumentsBase(BaseService, ABC):
    def __init__(self, kernel: Kernel, schemas: SchemaService) -> None:
        super().__init__(kernel)
        self.schemas = schemas

    def visible(self, caller: Caller, kind: str, id_: str) -> Any:
        item = self.records.get(caller.context_id, kind, id_)
        grant = self.identity.read_lens(caller, None)
        if item is None or item.data.get("status") == "deleted" or not can_see(item.data.get("scopes"), grant):
            raise NotFound(f"{kind} {id_!r} not found")
        return item

    @staticmethod
    def _public(d: dict[str, Any], version: int) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k not in PRIVATE_DOCUMENT_FIELDS} | {"version": version}

    def _with_state(self, item: Item) -> dict[str, Any]:
        """The document's data with its processing state (when that state is of this version)."""
        data = dict(item.data)
        if data["status"] == "deleted":
            return data
        state = self.records.get(item.context_id, "docstate", item.id)
        if state is not None and state.data["version"] == item.version:
            data |= {k: state.data[k] for k in ("status", "stage", "error")}
        return data

    def _chunk_items(self, ctx: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks of the document's current version, read by key."""
        out = []
        for position in range(int(data["chunks"])):
            item = self.records.get(ctx, "chunk", chunk_key(data, position))
            if item is not None:
                out.append(item.data)
        return out

    def all_documents(self, caller: Caller) -> list[dict[str, Any]]:
        grant = self.identity.read_lens(caller, None)
        return [
            self._public(self._with_state(i), i.version)
            for i in scan(self.records, caller.context_id, "document")
            if i.data["status"] != "deleted" and can_see(i.data["scopes"], grant)
        ]

    def _embed_fn(self) -> Any:
        return None if self.embedder is None else self.embedder.embed

    @staticmethod
    def _chunk_data(doc_id: str, c: Chunk) -> dict[str, Any]:
        return {
            "document_id": doc_id,
            "text": c.text,
            "section": c.section,
            "position": c.position,
            "page": c.page,
            "tokens": c.tokens,
        }

    def _index_doc(self, ctx: str, doc: dict[str, Any], c: Chunk | dict[str, Any], vector: Any) -> IndexDoc:
        cd = c if isinstance(c, dict) else self._chunk_data(doc["id"], c)
        meta: dict[str, str | int | float | bool] = {
            "document_id": doc["id"],
            "title": doc["title"],
            "source": doc["source"] or "",
            "mime_type": doc["mime_type"],
            "collection": doc["collection"],
            "folder_id": doc["folder_id"] or "",
            "type": doc["type"],
            "section": cd["section"],
            "position": cd["position"],
            "page": cd["page"] or 0,
            "created_at": doc["created_at"],
            "labels": ",".join(doc["labels"]),
        }
        meta |= {f"m.{k}": _flat(v) for k, v in (doc.get("metadata") or {}).items()}
        # The title always leads (even where the text repeats it: a title is worth counting twice, as a
        # title field's boost would; measured on cranfield in bench/RESULTS.md); the section when the
        # text does not already start with it.
        head = cd["text"][:300].lower()
        section = cd["section"]
        parts = (doc["title"], section if section and section.lower().strip() not in head else "")
        header = " — ".join(x for x in parts if x and not x.startswith("Page "))
        text = f"{header}\n{cd['text']}" if header else cd["text"]
        return IndexDoc(ctx, "chunk", chunk_key(doc, cd["position"]), text, vector, doc["scopes"], None, None, meta)

    def _index_docs(self, ctx: str, docs: list[IndexDoc]) -> None:
        if docs:
            self.index.upsert(docs)

    def _set_status(self, ctx: str, doc_id: str, version: int, status: str, stage: str, error: str | None) -> None:
        """Processing state is not a user version: it lives in its own `docstate` record, so a client's
        `expectedVersion` from the ingest answer still holds after indexing."""
        state = {"version": version, "status": status, "stage": stage, "error": error}
        self.records.transact([Write(ctx, "docstate", doc_id, state, "worker")], self.clock.now())

    @abstractmethod
    def delete(self, caller: Caller, doc_id: str) -> dict[str, Any]:
        """Delete a document (ingest and change: `documents.DocumentService`)."""
