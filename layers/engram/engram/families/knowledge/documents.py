"""The knowledge family's domain logic: documents in, cited passages out.

- A document's bytes go to the BlobStore; its metadata, status and versions are `document` items.
- Ingest parses and chunks synchronously (a corrupt file fails before anything is stored) and indexes
  the chunks for BM25 at once; embedding runs on the Queue, after which the status is `indexed`.
- `hash` items deduplicate identical bytes; `extid` items make ingest idempotent by externalId.
- Collections (Cortex) are flat named groups; folders (Vectros) are a tree. A document belongs to at
  most one of each, and both are search filters.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any
from urllib.parse import unquote_plus

import blake3

from engram.families.entities import graph
from engram.families.knowledge import EMBED_JOB
from engram.families.knowledge.base import (
    _RETRIES,
    DEFAULT_COLLECTION,
    INBOX,
    LOOKUP,
    MAX_DOCUMENT_BYTES,
    NewDocument,
    chunk_ids,
    chunk_key,
    chunk_prefix,
)
from engram.families.knowledge.chunking import chunk
from engram.families.knowledge.embedding import Embedding
from engram.families.knowledge.folders import Containers
from engram.families.knowledge.parsing import TEXT, detect, parse
from engram.families.knowledge.search import Answers
from engram.families.knowledge.staging import Staging
from engram.families.records import lookups
from engram.families.records.schemas import Schema
from engram.kernel.caller import Caller, Principal
from engram.kernel.clock import iso, new_id
from engram.kernel.errors import Conflict, EngramError, InvalidInput, NotFound
from engram.kernel.ports import Item, Progress, Write, no_progress
from engram.kernel.scopes import can_see, tags_key
from engram.kernel.unit_of_work import UnitOfWork

__all__ = ["MAX_DOCUMENT_BYTES", "DocumentService", "NewDocument"]


class DocumentService(Embedding, Staging, Answers, Containers):
    """Documents in, cited passages out: ingest and change here; the rest in its parts (`base`)."""

    # -- ingest ---------------------------------------------------------------------------
    #
    # Every write follows one rule (DESIGN §9, "nothing visible before the commit"): whatever the write
    # needs is prepared under names nobody reads yet (a new blob key, chunk ids of the new version), the
    # records and the job that finishes the work are committed in one version-checked transaction, and
    # only then does the index change and the old version retire. A writer that loses the commit deletes
    # its own unreferenced blob and leaves nothing else. A crash after the commit leaves the job, which
    # any process finishes (engram.kernel.queue).

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
        same = (digest, new.schema_id, new.payload)  # what an externalId's document must hold to be this one
        found = self._duplicate(ctx, visibility, hash_key, same, ext_key, new.external_id)
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
        chunk_writes = [Write(ctx, "chunk", chunk_key(data, c["position"]), c, caller.actor) for c in chunk_data]
        staged: Write | None = None

        def discard() -> None:  # nothing committed: the blob and any staged chunks go
            self.blobs.delete(blob_key)
            self._lost(staged)

        for attempt in range(_RETRIES):
            writes = [Write(ctx, "document", doc_id, data, caller.actor, expected_version=0)]
            writes.append(self._pointer(ctx, "hash", hash_key, doc_id, caller.actor))
            claim = self._claim(ctx, ext_key, doc_id, caller.actor) if ext_key else []
            writes += claim or []  # None: another document holds the externalId (the answer, or a conflict)
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
            if schema is not None:  # its lookup fields, queryable by document_query like a record's
                keys = lookups.entries(schema, new.payload or {}, str(data["created_at"]), new.external_id, doc_id)
                writes += lookups.changes(ctx, LOOKUP, caller.actor, set(), keys, "document", doc_id)
            if staged is None and self._needs_staging(len(chunk_writes), len(writes) + 2):
                staged = self._stage(ctx, doc_id, f"{doc_id}#", chunk_writes, now)
            writes += chunk_writes if staged is None else []
            job = self.queue.job(EMBED_JOB, {"context_id": ctx, "document_id": doc_id, "version": 1}, now)
            names = graph.extraction_job(self.queue, ctx, "document", doc_id, now)
            try:  # commit, then the chunks searchable by keyword at once, then the embedding and graph jobs
                if claim is None:
                    raise Conflict("the externalId was taken meanwhile")
                reindex = partial(self._searchable_now, ctx, data, chunk_data)
                UnitOfWork(self.records, self.queue).commit(writes, now, reindex=reindex, jobs=[job, names],
                                                            covered=True)  # fmt: skip
            except Conflict:
                # a concurrent write won: the same bytes or externalId (then that is the answer, or an
                # externalId's conflict), or the collection was created meanwhile (then try again)
                try:
                    found = self._duplicate(ctx, visibility, hash_key, same, ext_key, new.external_id)
                except Conflict:
                    discard()
                    raise
                if found is not None or attempt == _RETRIES - 1:
                    discard()
                    if found is not None:
                        return found
                    raise
                continue
            except BaseException:
                discard()
                raise
            break
        self._committed(staged)
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

    def _claim(self, ctx: str, ext_key: str, doc_id: str, actor: str) -> list[Write] | None:
        """The writes that make `doc_id` the one document of an externalId (in its scope set): the pointer made
        (version 0: of two writers one wins), or taken over from a deleted document (version-checked, and that
        document checked still deleted). None: a live document holds it."""
        current = self.records.get(ctx, "extid", ext_key)
        if current is None:
            return [Write(ctx, "extid", ext_key, {"document_id": doc_id}, actor, 0)]
        held = self.records.get(ctx, "document", current.data["document_id"])
        if held is not None and held.data["status"] != "deleted":
            return None
        writes = [Write(ctx, "extid", ext_key, {"document_id": doc_id}, actor, current.version)]
        if held is not None:
            writes.append(Write(ctx, "document", held.id, {}, actor, held.version, check=True))
        return writes

    def _duplicate(
        self,
        ctx: str,
        visibility: list[list[str]],
        hash_key: str,
        same: tuple[str, str | None, dict[str, Any] | None],
        ext_key: str | None,
        external_id: str | None,
    ) -> dict[str, Any] | None:
        """The ingest answer for a document these bytes (or this externalId) already made, if the caller can see
        it and it still holds them. An externalId whose document holds other content (or another type or
        payload) is `external_id_conflict`, as `record_create` answers: never a success that drops what was
        sent."""
        for kind, key in (("extid", ext_key), ("hash", hash_key)):
            pointer = self.records.get(ctx, kind, key) if key else None
            if pointer is None:
                continue
            item = self.records.get(ctx, "document", pointer.data["document_id"])
            if item is None or item.data["status"] == "deleted":
                continue
            d = item.data
            held = (d["content_hash"], d.get("schema_id"), d.get("payload"))
            if kind == "extid" and (held != same or not can_see(d["scopes"], visibility)):
                raise Conflict(f"externalId {external_id!r} already names a document with other content",
                               code="external_id_conflict")  # fmt: skip
            if not can_see(d["scopes"], visibility) or d["content_hash"] != same[0]:
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

    def blob_created_job(self, payload: dict[str, Any]) -> None:
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

    def get(self, caller: Caller, doc_id: str, include_text: bool = False, url: bool = False) -> dict[str, Any]:
        item = self.visible(caller, "document", doc_id)
        out = self._public(self._with_state(item), item.version)
        if include_text:
            out["text"] = "\n\n".join(c["text"] for c in self._chunk_items(caller.context_id, item.data))
        if url:
            out["download_url"] = self.blobs.url(item.data["blob_key"])
        return out

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
        old_chunks = chunk_ids(chunk_prefix(item.data), int(item.data["chunks"]))
        retire: dict[str, Any] = {}
        ahead = False
        chunk_data: list[dict[str, Any]] | None = None
        new_blob: str | None = None
        if text is not None:
            raw = text.encode()
            blocks = parse(raw, TEXT, data["title"])
            new_chunks = chunk(blocks, data["strategy"], data["max_tokens"], data["overlap"], self._embed_fn())
            chunk_data = [self._chunk_data(doc_id, c) for c in new_chunks]
            # names of this write alone: a concurrent writer of the same version never shares them
            new_blob = f"{ctx}/{doc_id}/{new_id('v')}"
            # chunks too many for the commit's transaction are written ahead of it: under ids of this write alone
            ahead = self._needs_staging(len(new_chunks), 4)  # the document, a folder's fence, two jobs
            data |= {
                "blob_key": new_blob,
                "content_hash": "blake3:" + blake3.blake3(raw).hexdigest(),
                "mime_type": TEXT,
                "chunks": len(new_chunks),
                "chunk_prefix": f"{doc_id}#v{version}." + (new_id("s")[-10:] + "." if ahead else ""),
                "total_tokens": sum(c.tokens for c in new_chunks),
                "bytes": len(raw),
                "status": "queued",
                "stage": "bm25",
            }
            retire = {**self._chunk_span(item.data), "blob": item.data["blob_key"]}
            self.blobs.put(new_blob, raw, TEXT)
        writes = [Write(ctx, "document", doc_id, data, caller.actor, item.version)]
        if data.get("folder_id") and data.get("folder_id") != item.data.get("folder_id"):
            writes.append(self._fence(ctx, "folder", data["folder_id"], caller.actor))
        chunk_writes = [Write(ctx, "chunk", chunk_key(data, c["position"]), c, caller.actor) for c in chunk_data or []]
        staged = self._stage(ctx, doc_id, data["chunk_prefix"], chunk_writes, now) if ahead else None
        writes += chunk_writes if staged is None else []
        job = self.queue.job(
            EMBED_JOB, {"context_id": ctx, "document_id": doc_id, "version": version, "retire": retire}, now
        )
        names = graph.extraction_job(self.queue, ctx, "document", doc_id, now)

        def reindex(_: list[Item]) -> None:
            if chunk_data is None:  # metadata only: the same chunks, indexed again with it, vectors kept
                self._index_now(ctx, data, self._chunk_items(ctx, data), [], reuse="title" not in changes)
            else:
                self._index_now(ctx, data, chunk_data, old_chunks)

        try:
            UnitOfWork(self.records, self.queue).commit(writes, now, reindex=reindex, jobs=[job, names], covered=True)
        except BaseException:
            if new_blob is not None:
                self.blobs.delete(new_blob)  # the loser leaves no trace
            self._lost(staged)
            raise
        self._committed(staged)
        return self.get(caller, doc_id)

    def delete(self, caller: Caller, doc_id: str) -> dict[str, Any]:
        item = self.visible(caller, "document", doc_id)
        ctx, now = caller.context_id, self.clock.now()
        retired = chunk_ids(chunk_prefix(item.data), int(item.data["chunks"]))
        data = dict(item.data, status="deleted", deleted_at=iso(now))
        job = self.queue.job(
            EMBED_JOB,
            {
                "context_id": ctx,
                "document_id": doc_id,
                "version": item.version + 1,
                "retire": self._chunk_span(item.data),
            },
            now,
        )
        gone = lookups.changes(ctx, LOOKUP, caller.actor, self._lookup_entries(item), set(), "document", doc_id)
        names = graph.extraction_job(self.queue, ctx, "document", doc_id, now)  # its names and edges leave too
        UnitOfWork(self.records, self.queue).commit(
            [Write(ctx, "document", doc_id, data, caller.actor, item.version), *gone],
            now,
            reindex=lambda _: self.index.delete(ctx, retired),  # gone from search at once; the job purges chunks
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
