"""The knowledge family's domain logic: documents in, cited passages out.

- A document's bytes go to the BlobStore; its metadata, status and versions are `document` items.
- Ingest parses and chunks synchronously (a corrupt file fails before anything is stored) and indexes
  the chunks for BM25 at once; embedding runs on the Queue, after which the status is `indexed`.
- `hash` items deduplicate identical bytes; `extid` items make ingest idempotent by externalId.
- Collections (Cortex) are flat named groups; folders (Vectros) are a tree. A document belongs to at
  most one of each, and both are search filters.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import unquote_plus

import blake3

from engram.clock import Clock, iso, new_id, parse_time
from engram.errors import Conflict, EngramError, InvalidInput, NotFound
from engram.families.entities import graph
from engram.families.entities import service as entities
from engram.families.knowledge import EMBED_JOB, answering
from engram.families.knowledge.chunking import Chunk, Strategy, chunk
from engram.families.knowledge.parsing import TEXT, detect, parse
from engram.families.records import lookups
from engram.families.records.history import PRIVATE_DOCUMENT_FIELDS
from engram.families.records.schemas import Schema, SchemaService
from engram.identity import Caller, IdentityService, Principal
from engram.ports import (
    BlobStore,
    Embedder,
    Generator,
    Hit,
    IndexDoc,
    Item,
    Progress,
    RecordStore,
    SearchIndex,
    SearchMode,
    SearchQuery,
    Write,
    no_progress,
    scan,
)
from engram.queue import Queue
from engram.scopes import can_see, tags_key
from engram.search_rules import query_vector
from engram.unit_of_work import UnitOfWork

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


@dataclass
class Search:
    query: str
    mode: str = "hybrid"
    k: int = 10
    offset: int = 0
    threshold: float | None = None
    collection: str | None = None
    folder_id: str | None = None
    doc_type: str | None = None
    mime_types: list[str] | None = None
    document_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_from: str | None = None
    created_to: str | None = None
    lens: list[list[str]] | None = None
    match_all: bool = False
    kinds: tuple[str, ...] = ("chunk",)  # Vectros' searches add "record": records whose indexMode is not none


def _flat(value: Any) -> str | int | float | bool:
    return value if isinstance(value, str | int | float | bool) else str(value)


class DocumentService:
    def __init__(
        self,
        records: RecordStore,
        blobs: BlobStore,
        index: SearchIndex,
        embedder: Embedder | None,
        clock: Clock,
        identity: IdentityService,
        queue: Queue,
        generator: Generator | None = None,
        schemas: SchemaService | None = None,
    ) -> None:
        self.records, self.blobs, self.index, self.embedder = records, blobs, index, embedder
        self.clock, self.identity, self.queue, self.generator = clock, identity, queue, generator
        self.schemas = schemas or SchemaService(records, clock)

    # -- ingest ---------------------------------------------------------------------------
    #
    # Every write follows one rule (DESIGN §9, "nothing visible before the commit"): whatever the write
    # needs is prepared under names nobody reads yet (a new blob key, chunk ids of the new version), the
    # records and the job that finishes the work are committed in one version-checked transaction, and
    # only then does the index change and the old version retire. A writer that loses the commit deletes
    # its own unreferenced blob and leaves nothing else. A crash after the commit leaves the job, which
    # any process finishes (engram.queue).

    def ingest(self, caller: Caller, new: NewDocument) -> dict[str, Any]:
        ctx = caller.context_id
        name = new.filename or new.title or "document"
        if not new.data:
            raise InvalidInput(f"{name}: empty document")
        if len(new.data) > MAX_DOCUMENT_BYTES:
            raise InvalidInput(f"{name}: over {MAX_DOCUMENT_BYTES} bytes", code="payload_too_large")
        tags = self.identity.write_scopes(caller, new.scopes)
        visibility = self.identity.read_lens(caller, None)
        schema = self._typed(ctx, new.schema_id, new.payload)
        collection = new.collection or DEFAULT_COLLECTION
        if new.folder_id is not None:
            self._folder(caller, new.folder_id)
        digest = "blake3:" + blake3.blake3(new.data).hexdigest()
        # Dedup and externalIds are per scope set: another scope set's documents are never matched.
        hash_key = f"{collection}|{tags_key(tags)}|{digest}"
        ext_key = f"{tags_key(tags)}|{new.external_id}" if new.external_id else None
        found = self._duplicate(ctx, visibility, hash_key, digest, ext_key)
        if found is not None:
            return found
        mime = detect(new.data, new.mime_type, new.filename)
        blocks = parse(new.data, mime, name)
        chunks = chunk(blocks, new.strategy, new.max_tokens, new.overlap, self._embed_fn())
        doc_id = new_id("doc")
        blob_key = f"{ctx}/{doc_id}/v1"
        now = self.clock.now()
        data = {
            "id": doc_id,
            "title": new.title or new.filename or (chunks[0].text[:60] if chunks else name),
            "source": new.source or new.filename or "",
            "source_url": new.source_url,
            "mime_type": mime,
            "filename": new.filename,
            "collection": collection,
            "folder_id": new.folder_id,
            "labels": new.labels,
            "metadata": new.metadata,
            "scopes": tags,
            "content_hash": digest,
            "hash_key": hash_key,
            "external_id": new.external_id,
            "extid_key": ext_key,
            "schema_id": new.schema_id,
            "payload": new.payload,
            "type": new.doc_type or new.schema_id or "document",
            "status": "queued",
            "stage": "bm25",
            "error": None,
            "chunks": len(chunks),
            "chunk_prefix": f"{doc_id}#",
            "total_tokens": sum(c.tokens for c in chunks),
            "bytes": len(new.data),
            "blob_key": blob_key,
            "created_at": iso(now),
            "updated_at": iso(now),
            "strategy": new.strategy,
            "max_tokens": new.max_tokens,
            "overlap": new.overlap,
        }
        self.blobs.put(blob_key, new.data, mime)  # a new name: nothing refers to it before the commit
        chunk_data = [self._chunk_data(doc_id, c) for c in chunks]
        for attempt in range(_RETRIES):
            writes = [Write(ctx, "document", doc_id, data, caller.actor, expected_version=0)]
            writes.append(self._pointer(ctx, "hash", hash_key, doc_id, caller.actor))
            if ext_key:
                writes.append(self._pointer(ctx, "extid", ext_key, doc_id, caller.actor))
            coll = self.records.get(ctx, "collection", collection)
            if coll is None:
                info = {"name": collection, "description": "", "created_at": iso(now), "scopes": tags}
                writes.append(Write(ctx, "collection", collection, info, caller.actor, 0))
            elif not set(tags) <= set(coll.data.get("scopes") or []):  # it now holds these scopes' documents
                info = dict(coll.data, scopes=sorted(set(coll.data.get("scopes") or []) | set(tags)))
                writes.append(Write(ctx, "collection", collection, info, caller.actor, coll.version))
            writes.append(self._fence(ctx, "collection", collection, caller.actor, reopen=coll is None))
            if new.folder_id is not None:
                writes.append(self._fence(ctx, "folder", new.folder_id, caller.actor))
            writes += [Write(ctx, "chunk", _chunk_key(data, c["position"]), c, caller.actor) for c in chunk_data]
            if schema is not None:  # its lookup fields, queryable by document_query like a record's
                keys = lookups.entries(schema, new.payload or {}, str(data["created_at"]), new.external_id, doc_id)
                writes += lookups.changes(ctx, LOOKUP, caller.actor, set(), keys, "document", doc_id)
            job = self.queue.job(EMBED_JOB, {"context_id": ctx, "document_id": doc_id, "version": 1}, now)
            names = graph.extraction_job(self.queue, ctx, "document", doc_id, now)
            try:  # commit, then the chunks searchable by keyword at once, then the embedding and graph jobs
                reindex = partial(self._searchable_now, ctx, data, chunk_data)
                UnitOfWork(self.records, self.queue).commit(writes, now, reindex=reindex, jobs=[job, names],
                                                            covered=True)  # fmt: skip
            except Conflict:
                # a concurrent write won: the same bytes or externalId (then that is the answer), or the
                # collection was created meanwhile (then try again)
                found = self._duplicate(ctx, visibility, hash_key, digest, ext_key)
                if found is not None or attempt == _RETRIES - 1:
                    self.blobs.delete(blob_key)
                    if found is not None:
                        return found
                    raise
                continue
            except BaseException:
                self.blobs.delete(blob_key)
                raise
            break
        return self._ingest_result(data, 1, deduplicated=False)

    def _searchable_now(self, ctx: str, data: dict[str, Any], chunks: list[dict[str, Any]], _: list[Item]) -> None:
        """A new document's chunks in the index by keyword, at once (their vectors follow from its job)."""
        self._index_now(ctx, data, chunks, [])

    def _typed(self, ctx: str, schema_id: str | None, payload: dict[str, Any] | None) -> Schema | None:
        """The document schema a typed document names, its payload checked against it."""
        if schema_id is None:
            return None
        schema = self.schemas.get(ctx, schema_id)
        if schema.surface != "document":
            raise InvalidInput(f"schemaId {schema_id!r} is a {schema.surface} schema, not a document type")
        schema.validate(payload or {})
        for lk in schema.lookups:
            lookups.check_value(lk.field, (payload or {}).get(lk.field))
        return schema

    def _lookup_entries(self, item: Item) -> set[str]:
        d = item.data
        schema = self.schemas.find(item.context_id, d["schema_id"]) if d.get("schema_id") else None
        if schema is None or d.get("status") == "deleted":
            return set()
        return lookups.entries(schema, d.get("payload") or {}, d["created_at"], d.get("external_id"), item.id)

    def lookup(
        self,
        caller: Caller,
        type_: str,
        field: str,
        op: Any,
        value: Any,
        low: Any,
        high: Any,
        descending: bool,
        limit: int,
        token: str | None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Typed documents of `type_` by a lookup field of its schema: key ranges, as records'."""
        schema = self.schemas.get(caller.context_id, type_)
        if schema.surface != "document":
            raise InvalidInput(f"type {type_!r} is a {schema.surface} schema, not a document type")
        grant = self.identity.read_lens(caller, None)
        found, next_token = lookups.find(
            self.records, caller.context_id, LOOKUP, "document", schema, field, op, value, low, high, descending,
            limit, token,
            keep=lambda i: i.data["status"] != "deleted" and can_see(i.data["scopes"], grant),
            current=self._lookup_entries,
        )  # fmt: skip
        return [self._public(self._with_state(i), i.version) for i in found], next_token

    def _pointer(self, ctx: str, kind: str, key: str, doc_id: str, actor: str) -> Write:
        """A `hash` or `extid` record naming `doc_id`, replacing a stale one (its document deleted or
        changed) with a version check, so two writers cannot both claim it."""
        current = self.records.get(ctx, kind, key)
        return Write(ctx, kind, key, {"document_id": doc_id}, actor, current.version if current else 0)

    def _fence(self, ctx: str, kind: str, name: str, actor: str, reopen: bool = False) -> Write:
        """A write into a folder or collection requires, in its transaction, that this record is unchanged
        (a check: writes into one container never conflict with each other); a delete of the container
        closes it first, and it stays closed. So a document filed while the container is being deleted
        either commits before the close (and the delete sees it and stops) or fails on the version (and
        finds the container gone): no document is ever left pointing at a container that no longer exists.
        `reopen`: the write (re)creates the container (a collection's name can be used again)."""
        fence = self.records.get(ctx, "fence", f"{kind}:{name}")
        closed = fence is not None and bool(fence.data.get("closed"))
        version = fence.version if fence else 0
        if closed and reopen:
            return Write(ctx, "fence", f"{kind}:{name}", {"closed": False}, actor, version)
        if closed:
            if kind == "folder":
                raise NotFound(f"folder {name!r} not found")
            raise Conflict(f"collection {name!r} is being deleted; try again", code="in_use")
        return Write(ctx, "fence", f"{kind}:{name}", {}, actor, version, check=True)

    def _close(self, caller: Caller, kind: str, name: str, members: Callable[[], list[Item]]) -> None:
        """Delete a container record once nothing points at it: close its fence (for good), look again,
        then purge the record (or reopen and refuse when a document was filed before the close)."""
        ctx, now = caller.context_id, self.clock.now()
        fence = self.records.get(ctx, "fence", f"{kind}:{name}")
        closing = Write(ctx, "fence", f"{kind}:{name}", {"closed": True}, caller.actor, fence.version if fence else 0)
        try:
            closed = self.records.transact([closing], now)[0]
        except Conflict:
            raise Conflict(f"{kind} {name!r} is in use; try again", code="in_use") from None
        if members():
            reopen = Write(ctx, "fence", f"{kind}:{name}", {"closed": False}, caller.actor, closed.version)
            self.records.transact([reopen], now)
            raise Conflict(f"{kind} {name!r} is not empty", code="in_use")
        self.records.purge(ctx, kind, name)

    def _duplicate(
        self, ctx: str, visibility: list[list[str]], hash_key: str, digest: str, ext_key: str | None
    ) -> dict[str, Any] | None:
        """The ingest answer for a document these bytes (or this externalId) already made, if the caller
        can see it and it still holds them."""
        for kind, key in (("extid", ext_key), ("hash", hash_key)):
            pointer = self.records.get(ctx, kind, key) if key else None
            if pointer is None:
                continue
            item = self.records.get(ctx, "document", pointer.data["document_id"])
            if item is None or item.data["status"] == "deleted" or not can_see(item.data["scopes"], visibility):
                continue
            if kind == "hash" and item.data["content_hash"] != digest:
                continue  # its text was changed since
            return self._ingest_result(self._with_state(item), item.version, deduplicated=True)
        return None

    def _index_now(
        self, ctx: str, data: dict[str, Any], chunks: list[dict[str, Any]], retired: list[str], reuse: bool = False
    ) -> None:
        """After the commit: the new chunks searchable by BM25 at once (with their old vectors when `reuse`:
        only metadata changed), the retired ones gone. The queued job does it again if this process dies."""
        ctx_docs = [self._index_doc(ctx, data, c, None) for c in chunks]
        vectors = self.index.vectors(ctx, [d.id for d in ctx_docs]) if reuse else {}
        self.index.upsert([d.with_vector(vectors.get(d.id)) for d in ctx_docs])
        if retired:
            self.index.delete(ctx, retired)

    @staticmethod
    def _ingest_result(data: dict[str, Any], version: int, deduplicated: bool) -> dict[str, Any]:
        return {
            "id": data["id"],
            "document_id": data["id"],
            "status": data["status"],
            "stage": data["stage"],
            "content_hash": data["content_hash"],
            "deduplicated": deduplicated,
            "version": version,
            "collection": data["collection"],
            "chunks_created": data["chunks"],
            "total_tokens": data["total_tokens"],
        }

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
        return IndexDoc(ctx, "chunk", _chunk_key(doc, cd["position"]), text, vector, doc["scopes"], None, None, meta)

    def _blob_created_job(self, payload: dict[str, Any]) -> None:
        key = str(payload.get("key", ""))
        if key.startswith(INBOX):
            self.ingest_inbox(key, str(payload.get("etag") or ""))

    def ingest_inbox(self, key: str, etag: str = "") -> dict[str, Any]:
        """Ingest a file dropped at `inbox/{context_id}/{scope path}/{filename}` in the blob store.

        The path under the context is the document's scope (it must be a registered scope path); this is
        how files larger than an API request can carry are ingested. The S3 key and ETag make the
        ingest idempotent under redelivery; a changed file under the same key is a new document.
        Raises EngramError when the file cannot be ingested (a permanent failure: not retried).
        """
        if not self.blobs.exists(key) and self.blobs.exists(unquote_plus(key)):
            key = unquote_plus(key)  # S3 event notifications may carry the key URL-encoded
        parts = key[len(INBOX) :].split("/")
        if len(parts) < 3 or not all(parts):
            raise InvalidInput(f"{key}: inbox files go to inbox/<context_id>/<scope path>/<filename>")
        ctx, scope, filename = parts[0], "/".join(parts[1:-1]), parts[-1]
        principal = Principal("inbox", "management", (ctx,), (scope,))
        caller = Caller(principal, ctx, "inbox")
        new = NewDocument(
            data=self.blobs.get(key),
            title=filename,
            source=f"inbox:{key}",
            filename=filename,
            scopes=[[scope]],
            external_id=f"inbox:{key}#{etag}" if etag else f"inbox:{key}",
        )
        return self.ingest(caller, new)

    def _embed_job(self, payload: dict[str, Any]) -> None:
        self._embed_jobs([payload])

    def _embedding_failed(self, ctx: str, doc_id: str, version: int, exc: Exception) -> None:
        """The document stays findable by BM25; its status says why its vectors did not come."""
        self._set_status(ctx, doc_id, version, "failed", "bm25", f"embedding failed: {type(exc).__name__}")

    def _retire(self, ctx: str, retire: dict[str, Any]) -> None:
        """What a committed write replaced: its chunks (index and records) and its blob."""
        ids = list(retire.get("chunks") or [])
        if ids:
            self.index.delete(ctx, ids)
            for cid in ids:
                self.records.purge(ctx, "chunk", cid)
        if retire.get("blob"):
            self.blobs.delete(retire["blob"])

    def _embed_jobs(self, payloads: list[dict[str, Any]]) -> None:
        """Finish committed writes: the current version's chunks indexed with vectors (one embedding call
        for all the jobs' chunks: the model is much faster on batches), what they replaced retired, the
        status set. Reads are by key (consistent on every store), never through a query."""
        ready: list[tuple[str, str, int, list[IndexDoc]]] = []
        for p in payloads:
            ctx, doc_id, version = p["context_id"], p["document_id"], int(p["version"])
            self._retire(ctx, p.get("retire") or {})
            item = self.records.get(ctx, "document", doc_id)
            if item is None or item.version != version or item.data["status"] == "deleted":
                continue  # superseded (the newer write's job indexes it) or deleted while queued
            try:
                docs = [self._index_doc(ctx, item.data, c, None) for c in self._chunk_items(ctx, item.data)]
            except Exception as exc:
                self._embedding_failed(ctx, doc_id, version, exc)
                continue
            ready.append((ctx, doc_id, version, docs))
        have: dict[str, Any] = {}
        for ctx, _, _, docs in ready:  # vectors kept from before (a change of metadata only)
            have |= self.index.vectors(ctx, [d.id for d in docs])
        missing = [d for *_, docs in ready for d in docs if d.id not in have]
        if missing and self.embedder is not None:
            try:
                have |= dict(zip([d.id for d in missing], self.embedder.embed([d.text for d in missing]), strict=True))
            except Exception as exc:
                for ctx, doc_id, version, docs in ready:  # findable by BM25 all the same
                    self._index_docs(ctx, [d.with_vector(have.get(d.id)) for d in docs])
                    self._embedding_failed(ctx, doc_id, version, exc)
                return
        for ctx, doc_id, version, docs in ready:
            try:
                current = self.records.get(ctx, "document", doc_id)
                if current is None or current.version != version:
                    continue
                self._index_docs(ctx, [d.with_vector(have.get(d.id)) for d in docs])
                stage = "vectors" if self.embedder is not None else "bm25"
                self._set_status(ctx, doc_id, version, "indexed", stage, None)
            except Exception as exc:
                self._embedding_failed(ctx, doc_id, version, exc)

    def _index_docs(self, ctx: str, docs: list[IndexDoc]) -> None:
        if docs:
            self.index.upsert(docs)

    def _set_status(self, ctx: str, doc_id: str, version: int, status: str, stage: str, error: str | None) -> None:
        """Processing state is not a user version: it lives in its own `docstate` record, so a client's
        `expectedVersion` from the ingest answer still holds after indexing."""
        state = {"version": version, "status": status, "stage": stage, "error": error}
        self.records.transact([Write(ctx, "docstate", doc_id, state, "worker")], self.clock.now())

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
            item = self.records.get(ctx, "chunk", _chunk_key(data, position))
            if item is not None:
                out.append(item.data)
        return out

    def bulk_ingest(
        self, caller: Caller, docs: Sequence[NewDocument], progress: Progress = no_progress
    ) -> dict[str, Any]:
        ingested, chunks = 0, 0
        errors: list[dict[str, Any]] = []
        ids: list[str] = []
        for i, new in enumerate(docs):
            try:
                out = self.ingest(caller, new)
                ingested += 1
                chunks += out["chunks_created"]
                ids.append(out["id"])
            except EngramError as exc:
                errors.append({"index": i, "title": new.title, "status": exc.status, "error": exc.message})
            progress(i + 1, len(docs), None)
        return {"documents_ingested": ingested, "total_chunks": chunks, "errors": errors, "document_ids": ids}

    # -- read -----------------------------------------------------------------------------

    def visible(self, caller: Caller, kind: str, id_: str) -> Any:
        item = self.records.get(caller.context_id, kind, id_)
        grant = self.identity.read_lens(caller, None)
        if item is None or item.data.get("status") == "deleted" or not can_see(item.data.get("scopes"), grant):
            raise NotFound(f"{kind} {id_!r} not found")
        return item

    def get(self, caller: Caller, doc_id: str, include_text: bool = False, url: bool = False) -> dict[str, Any]:
        item = self.visible(caller, "document", doc_id)
        out = self._public(self._with_state(item), item.version)
        if include_text:
            out["text"] = "\n\n".join(c["text"] for c in self._chunk_items(caller.context_id, item.data))
        if url:
            out["download_url"] = self.blobs.url(item.data["blob_key"])
        return out

    @staticmethod
    def _public(d: dict[str, Any], version: int) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k not in PRIVATE_DOCUMENT_FIELDS} | {"version": version}

    def chunks(self, caller: Caller, doc_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
        item = self.visible(caller, "document", doc_id)
        prefix = item.data.get("chunk_prefix") or f"{doc_id}#"
        page = self.records.query(caller.context_id, "chunk", prefix=prefix, cursor=cursor, limit=limit)
        items = [dict(i.data, id=i.id) for i in page.items if i.id[len(prefix) :].isdigit()]
        return {"document_id": doc_id, "chunks": items, "cursor": page.cursor}

    def chunk(self, caller: Caller, chunk_id: str) -> dict[str, Any]:
        """One chunk by its id."""
        doc_id = chunk_id.split("#", 1)[0]
        item = self.visible(caller, "document", doc_id)
        current = chunk_id.startswith(item.data.get("chunk_prefix") or f"{doc_id}#")
        found = self.records.get(caller.context_id, "chunk", chunk_id) if current else None
        if found is None:
            raise NotFound(f"chunk {chunk_id!r} not found")
        return dict(found.data, id=chunk_id)

    # -- change ---------------------------------------------------------------------------

    def update(
        self, caller: Caller, doc_id: str, changes: dict[str, Any], expected_version: int | None
    ) -> dict[str, Any]:
        item = self.visible(caller, "document", doc_id)
        if expected_version is not None and expected_version != item.version:
            raise Conflict(
                f"document is at version {item.version}, expected {expected_version}", code="version_conflict"
            )
        ctx, now, data = caller.context_id, self.clock.now(), dict(item.data)
        text = changes.pop("text", None)
        if "folder_id" in changes and changes["folder_id"] is not None:
            self._folder(caller, changes["folder_id"])
        if "scopes" in changes:
            changes["scopes"] = self.identity.write_scopes(caller, changes["scopes"])
        data.update({k: v for k, v in changes.items() if v is not None})
        data["updated_at"] = iso(now)
        version = item.version + 1
        old_chunks = [_chunk_key(item.data, p) for p in range(int(item.data["chunks"]))]
        retire: dict[str, Any] = {}
        chunk_data: list[dict[str, Any]] | None = None
        new_blob: str | None = None
        if text is not None:
            raw = text.encode()
            blocks = parse(raw, TEXT, data["title"])
            new_chunks = chunk(blocks, data["strategy"], data["max_tokens"], data["overlap"], self._embed_fn())
            chunk_data = [self._chunk_data(doc_id, c) for c in new_chunks]
            # names of this write alone: a concurrent writer of the same version never shares them
            new_blob = f"{ctx}/{doc_id}/{new_id('v')}"
            data |= {
                "blob_key": new_blob,
                "content_hash": "blake3:" + blake3.blake3(raw).hexdigest(),
                "mime_type": TEXT,
                "chunks": len(new_chunks),
                "chunk_prefix": f"{doc_id}#v{version}.",
                "total_tokens": sum(c.tokens for c in new_chunks),
                "bytes": len(raw),
                "status": "queued",
                "stage": "bm25",
            }
            retire = {"chunks": old_chunks, "blob": item.data["blob_key"]}
            self.blobs.put(new_blob, raw, TEXT)
        writes = [Write(ctx, "document", doc_id, data, caller.actor, item.version)]
        if data.get("folder_id") and data.get("folder_id") != item.data.get("folder_id"):
            writes.append(self._fence(ctx, "folder", data["folder_id"], caller.actor))
        writes += [Write(ctx, "chunk", _chunk_key(data, c["position"]), c, caller.actor) for c in chunk_data or []]
        job = self.queue.job(
            EMBED_JOB, {"context_id": ctx, "document_id": doc_id, "version": version, "retire": retire}, now
        )
        names = graph.extraction_job(self.queue, ctx, "document", doc_id, now)

        def reindex(_: list[Item]) -> None:
            if chunk_data is None:  # metadata only: the same chunks, indexed again with it, vectors kept
                self._index_now(ctx, data, self._chunk_items(ctx, data), [], reuse="title" not in changes)
            else:
                self._index_now(ctx, data, chunk_data, retire["chunks"])

        try:
            UnitOfWork(self.records, self.queue).commit(writes, now, reindex=reindex, jobs=[job, names], covered=True)
        except BaseException:
            if new_blob is not None:
                self.blobs.delete(new_blob)  # the loser leaves no trace
            raise
        return self.get(caller, doc_id)

    def delete(self, caller: Caller, doc_id: str) -> dict[str, Any]:
        item = self.visible(caller, "document", doc_id)
        ctx, now = caller.context_id, self.clock.now()
        chunk_ids = [_chunk_key(item.data, p) for p in range(int(item.data["chunks"]))]
        data = dict(item.data, status="deleted", deleted_at=iso(now))
        job = self.queue.job(
            EMBED_JOB,
            {"context_id": ctx, "document_id": doc_id, "version": item.version + 1, "retire": {"chunks": chunk_ids}},
            now,
        )
        gone = lookups.changes(ctx, LOOKUP, caller.actor, self._lookup_entries(item), set(), "document", doc_id)
        names = graph.extraction_job(self.queue, ctx, "document", doc_id, now)  # its names and edges leave too
        UnitOfWork(self.records, self.queue).commit(
            [Write(ctx, "document", doc_id, data, caller.actor, item.version), *gone],
            now,
            reindex=lambda _: self.index.delete(ctx, chunk_ids),  # gone from search at once; the job purges chunks
            jobs=[job, names],
            covered=True,
        )
        for kind, key in (("hash", data.get("hash_key")), ("extid", data.get("extid_key"))):
            pointer = self.records.get(ctx, kind, key) if key else None
            if key and pointer is not None and pointer.data["document_id"] == doc_id:
                self.records.purge(ctx, kind, key)
        return {"id": doc_id, "deleted": True, "version": item.version + 1}

    def history(self, caller: Caller, doc_id: str) -> list[dict[str, Any]]:
        self.visible(caller, "document", doc_id)
        return [
            {"version": h.version, "actor": h.actor, "at": iso(h.updated_at), "status": h.data.get("status")}
            for h in self.records.history(caller.context_id, "document", doc_id)
        ]

    def all_documents(self, caller: Caller) -> list[dict[str, Any]]:
        grant = self.identity.read_lens(caller, None)
        return [
            self._public(self._with_state(i), i.version)
            for i in scan(self.records, caller.context_id, "document")
            if i.data["status"] != "deleted" and can_see(i.data["scopes"], grant)
        ]

    # -- search and answers ---------------------------------------------------------------

    def search(self, caller: Caller, s: Search) -> dict[str, Any]:
        started = time.perf_counter()
        visibility = self.identity.read_lens(caller, s.lens)
        meta: dict[str, Any] = {f"m.{k}": v for k, v in s.metadata.items()}
        for key, value in (
            ("collection", s.collection),
            ("folder_id", s.folder_id),
            ("type", s.doc_type),
            ("document_id", s.document_id),
            ("mime_type", s.mime_types),
        ):
            if value:
                meta[key] = value
        ranges = {}
        if s.created_from or s.created_to:
            lo, hi = parse_time(s.created_from), parse_time(s.created_to)
            ranges["created_at"] = (iso(lo), iso(hi))
        # every mode embeds the query: a result's score weighs both kinds of evidence (search_rules.scored)
        vector = query_vector(self.embedder, s.query, ranks=s.mode != "bm25")
        mode: SearchMode = "vector" if s.mode == "vector" else "hybrid"
        if vector is None or s.mode == "bm25":
            mode = "bm25"
        hits = self.index.search(
            SearchQuery(
                caller.context_id,
                s.query,
                vector,
                mode,
                s.k + s.offset,
                s.kinds,
                visibility,
                None,
                meta,
                ranges,
                s.match_all,
                feedback=True,  # documents: a second round from the first one's best passages
            ),
            self.clock.now(),
        )[s.offset :]
        if s.threshold is not None:
            hits = [h for h in hits if h.score >= s.threshold]
        return {
            "results": [self._result(caller, h) for h in hits],
            "search_mode": s.mode,
            "queryMs": round((time.perf_counter() - started) * 1000, 3),
        }

    def _result(self, caller: Caller, h: Hit) -> dict[str, Any]:
        m = h.metadata
        if h.kind == "record":  # a typed record (engram.families.records.service), in the same fields
            return {
                "kind": "record",
                "record": {"id": h.id, "type": m.get("type"), "externalId": m.get("external_id") or None},
                "chunk": {"id": h.id, "text": h.text, "section": "", "position": 0, "page": None},
                "score": round(h.score, 6),
                "chunk_id": h.id,
                "record_id": h.id,
                "document_id": None,
                "title": m.get("title"),
                "content": h.text,
                "metadata": {k[2:]: v for k, v in m.items() if k.startswith("m.")},
            }
        item = self.records.get(caller.context_id, "chunk", h.id)
        text = item.data["text"] if item is not None else h.text
        page = int(m.get("page", 0) or 0) or None
        user_meta = {k[2:]: v for k, v in m.items() if k.startswith("m.")}
        return {
            "chunk": {
                "id": h.id,
                "text": text,
                "section": m.get("section", ""),
                "position": m.get("position"),
                "page": page,
            },
            "score": round(h.score, 6),
            "document": {
                "id": m.get("document_id"),
                "title": m.get("title"),
                "source": m.get("source"),
                "collection": m.get("collection"),
                "mime_type": m.get("mime_type"),
            },
            "chunk_id": h.id,
            "document_id": m.get("document_id"),
            "title": m.get("title"),
            "content": text,
            "metadata": user_meta,
        }

    def ask(
        self,
        caller: Caller,
        question: str,
        s: Search,
        instructions: str | None,
        temperature: float,
        progress: Progress = no_progress,
    ) -> dict[str, Any]:
        progress(0, 3, "retrieving passages")
        found = self.search(caller, s)["results"]
        progress(1, 3, "reading passages")
        result = answering.answer(question, found, self.generator, instructions, temperature)
        progress(3, 3, "done")
        return result

    def expand_neighbours(self, caller: Caller, results: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
        """hybrid_graph: follow the document structure from the top hits to their neighbouring chunks
        (position - 1 and + 1), scored at half their source's score."""
        seen = {r["chunk_id"] for r in results}
        extra: list[dict[str, Any]] = []
        for r in results[:3]:
            pos = r["chunk"]["position"]
            for neighbour in (pos - 1, pos + 1):
                cid = f"{r['chunk_id'][:-5]}{neighbour:05d}" if neighbour >= 0 else None
                if cid is None or cid in seen:
                    continue
                item = self.records.get(caller.context_id, "chunk", cid)
                if item is None:
                    continue
                seen.add(cid)
                c = item.data
                extra.append(
                    dict(
                        r,
                        chunk={
                            "id": cid,
                            "text": c["text"],
                            "section": c["section"],
                            "position": c["position"],
                            "page": c["page"],
                        },
                        chunk_id=cid,
                        content=c["text"],
                        score=round(r["score"] / 2, 6),
                        via=r["chunk_id"],
                    )
                )
        return sorted(results + extra, key=lambda r: -r["score"])[:k]

    def node(self, caller: Caller, kind: str, slug: str) -> dict[str, Any]:
        """A knowledge node: an entity by type and name, with the relations that start from it — each as
        the caller may see it (an entity by the scopes of what mentioned it, an edge by its own)."""
        ctx = caller.context_id
        visibility = self.identity.read_lens(caller, None)
        # Spectron's slugs: `jane_smith` or `jane-smith` name the entity `Person:jane smith`
        wanted = {f"{kind}:{slug}".lower(), f"{kind}:{slug.replace('_', ' ').replace('-', ' ')}".lower()}
        item = next((i for i in scan(self.records, ctx, "entity") if i.id.lower() in wanted), None)
        if item is not None and item.data.get("merged_into"):  # merged away: the entity it went into
            item = self.records.get(ctx, "entity", item.data["merged_into"])
        if item is None or not can_see(item.data.get("scopes"), visibility) or not entities.active(item.data):
            raise NotFound(f"node {kind}/{slug} not found")
        me = item.id.lower().split(":", 1)
        edges = []
        for rel in scan(self.records, ctx, "relation"):
            d = rel.data
            ends = [str(x).lower() for x in d.get("from", [])], [str(x).lower() for x in d.get("to", [])]
            if me not in ends or not entities.current_edge(d) or not can_see(d.get("scopes"), visibility):
                continue
            edge = {"id": rel.id, "type": d["type"], "from": d["from"], "to": d["to"], "since": d.get("since"),
                    "direction": "outgoing" if ends[0] == me else "incoming",
                    "evidence": entities.evidence(d, visibility)}  # fmt: skip
            edges.append(edge)
        # no version: it counts the mentions of every scope, some of which the caller may not see
        return {"kind": "node", "node": entities.public(item, visibility), "edges": edges}

    # -- collections and folders ----------------------------------------------------------
    #
    # Both carry scopes: a collection those of everything put in it (and of whoever created it), a folder
    # its creator's. A caller sees one it may see (engram.scopes.can_see) or that holds a document it may
    # see. Deleting one that holds anything the caller cannot see is refused without saying what, and no
    # delete leaves a document pointing at a collection or folder that is gone.

    def _members(self, ctx: str, key: str, value: str) -> list[Item]:
        """Every live document (whoever may see it) whose `key` is `value`."""
        return [
            i for i in scan(self.records, ctx, "document") if i.data["status"] != "deleted" and i.data.get(key) == value
        ]

    def _collection(self, caller: Caller, name: str, visibility: list[list[str]]) -> Item | None:
        item = self.records.get(caller.context_id, "collection", name)
        if item is None:
            return None
        if can_see(item.data.get("scopes"), visibility):
            return item
        members = self._members(caller.context_id, "collection", name)
        return item if any(can_see(d.data["scopes"], visibility) for d in members) else None

    def collections(
        self, caller: Caller, action: str, name: str | None, description: str | None, force: bool = False
    ) -> dict[str, Any]:
        ctx = caller.context_id
        visibility = self.identity.read_lens(caller, None)
        docs = self.all_documents(caller)
        if action == "list":
            names = [i.id for i in scan(self.records, ctx, "collection")]
            seen = [n for n in names if self._collection(caller, n, visibility) is not None]
            return {"collections": [self._stats(ctx, n, docs) for n in seen]}
        if not name:
            raise InvalidInput(f"name is required for action {action!r}")
        existing = self._collection(caller, name, visibility)
        if action == "create":
            if existing is not None:
                raise Conflict(f"collection {name!r} exists")
            tags = self.identity.write_scopes(caller, None)
            data = {"name": name, "description": description or "", "created_at": iso(self.clock.now()), "scopes": tags}
            writes = [Write(ctx, "collection", name, data, caller.actor, 0)]
            writes.append(self._fence(ctx, "collection", name, caller.actor, reopen=True))
            try:  # a collection of the same name the caller cannot see: the same answer as any other clash
                self.records.transact(writes, self.clock.now())
            except Conflict:
                raise Conflict(f"collection {name!r} exists") from None
            return {"collection": self._stats(ctx, name, docs)}
        if existing is None:
            raise NotFound(f"collection {name!r} not found")
        if action == "stats":
            return {"collection": self._stats(ctx, name, docs)}
        members = self._members(ctx, "collection", name)
        if not all(can_see(d.data["scopes"], visibility) for d in members):
            raise Conflict(f"collection {name!r} is in use; it cannot be deleted with this key", code="in_use")
        if members and not force:
            raise Conflict(f"collection {name!r} holds {len(members)} documents; pass force=true to delete them too")
        for d in members:
            self.delete(caller, d.id)
        self._close(caller, "collection", name, lambda: self._members(ctx, "collection", name))
        return {"deleted": name, "documents_deleted": len(members)}

    def _stats(self, ctx: str, name: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
        item = self.records.get(ctx, "collection", name)
        members = [d for d in docs if d["collection"] == name]
        return {
            "name": name,
            "description": item.data.get("description", "") if item else "",
            "document_count": len(members),
            "chunk_count": sum(d["chunks"] for d in members),
            # how much is not vector-searchable yet (BM25 finds it already), and how much failed
            "pending_count": sum(d["status"] == "queued" for d in members),
            "failed_count": sum(d["status"] == "failed" for d in members),
        }

    def _folder(self, caller: Caller, folder_id: str) -> dict[str, Any]:
        item = self.records.get(caller.context_id, "folder", folder_id)
        if item is None or not can_see(item.data.get("scopes"), self.identity.read_lens(caller, None)):
            raise NotFound(f"folder {folder_id!r} not found")
        return dict(item.data, version=item.version)

    @staticmethod
    def _public_folder(data: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in data.items() if k != "scopes"}

    def folder_create(
        self, caller: Caller, name: str, parent_id: str | None, description: str | None, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        if parent_id:
            self._folder(caller, parent_id)
        fid = new_id("fld")
        data = {
            "id": fid,
            "name": name,
            "parent_id": parent_id,
            "description": description or "",
            "metadata": metadata or {},
            "created_at": iso(self.clock.now()),
            "scopes": self.identity.write_scopes(caller, None),
        }
        writes = [Write(caller.context_id, "folder", fid, data, caller.actor, 0)]
        if parent_id:
            writes.append(self._fence(caller.context_id, "folder", parent_id, caller.actor))
        self.records.transact(writes, self.clock.now())
        return self._public_folder(dict(data, version=1))

    def folder_update(self, caller: Caller, folder_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        current = self._folder(caller, folder_id)
        if changes.get("parent_id"):
            node = changes["parent_id"]
            while node:  # refuse cycles
                if node == folder_id:
                    raise InvalidInput("a folder cannot be moved under itself")
                node = self._folder(caller, node).get("parent_id")
        version = current.pop("version")
        data = current | {k: v for k, v in changes.items() if v is not None}
        writes = [Write(caller.context_id, "folder", folder_id, data, caller.actor, version)]
        if changes.get("parent_id"):
            writes.append(self._fence(caller.context_id, "folder", changes["parent_id"], caller.actor))
        self.records.transact(writes, self.clock.now())
        return self._public_folder(dict(data, version=version + 1))

    def folder_delete(self, caller: Caller, folder_id: str) -> dict[str, Any]:
        ctx = caller.context_id
        self._folder(caller, folder_id)
        children = [i for i in scan(self.records, ctx, "folder") if i.data.get("parent_id") == folder_id]
        docs = self._members(ctx, "folder_id", folder_id)
        if children or docs:  # counted whoever may see them, and not said: the caller may not see them all
            raise Conflict("folder is not empty; empty it first", code="in_use")
        self._close(
            caller,
            "folder",
            folder_id,
            lambda: (
                [i for i in scan(self.records, ctx, "folder") if i.data.get("parent_id") == folder_id]
                + self._members(ctx, "folder_id", folder_id)
            ),
        )
        return {"id": folder_id, "deleted": True}

    def folder_list(
        self, caller: Caller, parent_id: str | None, name_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        visibility = self.identity.read_lens(caller, None)
        out = [
            self._public_folder(dict(i.data, version=i.version))
            for i in scan(self.records, caller.context_id, "folder")
            if can_see(i.data.get("scopes"), visibility)
        ]
        if parent_id is not None:
            out = [f for f in out if f.get("parent_id") == parent_id]
        if name_prefix:
            out = [f for f in out if f["name"].startswith(name_prefix)]
        return out


def _chunk_key(doc: dict[str, Any], position: int) -> str:
    """A chunk's id: the prefix of the document version that made it (documents from before prefixes
    were recorded use `{id}#`), then the position."""
    return f"{doc.get('chunk_prefix') or doc['id'] + '#'}{position:05d}"
