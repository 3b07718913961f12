"""Records (Vectros' `record_*` tools): typed JSON payloads, versioned, looked up by field, optionally searchable.

A record is one `record` item: its type (a schema of surface `record` or `identity`), its payload (valid
against the type's JSON Schema when written), an optional `externalId` (the client's own id: a create that
repeats one returns the record it made, unless the payload differs: a conflict), its `indexMode` and the
scopes of its writer. Its lookup entries (`engram.families.records.lookups`) and the pointer of its externalId are
written in the same transaction. Deleting leaves a last version (status `deleted`): reads stop at once,
the history stays (`version_history`).

Search: with `indexMode` `keyword` the record's text (its type and payload, flattened) is in the BM25
index; with `hybrid` also its vector; `none` keeps it out. The index is brought up to date right after
the commit, and a queued job (committed with the write, withdrawn once the index is written) finishes it
after a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from engram.families.entities import graph
from engram.families.records import INDEX_JOB, lookups
from engram.families.records.schemas import IndexMode, LookupOp, Schema, SchemaService
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, new_id
from engram.kernel.errors import Conflict, InvalidInput, NotFound, embedding_errors
from engram.kernel.ports import IndexDoc, Item, Write
from engram.kernel.retry import ATTEMPTS, on_conflict
from engram.kernel.scopes import can_see, tags_key
from engram.kernel.services import BaseService, Kernel
from engram.kernel.unit_of_work import UnitOfWork

log = logging.getLogger("engram.records")
KIND = "record"
LOOKUP = "rlookup"
EXTID = "rextid"
SAFETY_NET = timedelta(seconds=30)
MAX_EXTERNAL_ID = 256
MAX_TEXT = 8000  # characters of a record's searchable text


def _flatten(value: Any, path: str = "") -> list[str]:
    if isinstance(value, dict):
        return [line for k, v in value.items() for line in _flatten(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [line for v in value for line in _flatten(v, path)]
    if value is None:
        return []
    return [f"{path}: {value}"]


def title_of(data: dict[str, Any]) -> str:
    payload = data.get("payload") or {}
    for key in ("title", "name", "subject", "label"):
        if isinstance(payload.get(key), str) and payload[key].strip():
            return str(payload[key])[:200]
    return str(data.get("external_id") or f"{data['type']} {data['id']}")


def search_text(data: dict[str, Any]) -> str:
    return "\n".join([title_of(data), data["type"], *_flatten(data.get("payload") or {})])[:MAX_TEXT]


class RecordService(BaseService):
    def __init__(self, kernel: Kernel, schemas: SchemaService) -> None:
        super().__init__(kernel)
        self.schemas = schemas

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def public(item: Item) -> dict[str, Any]:
        d = item.data
        return {
            "id": item.id,
            "type": d["type"],
            "externalId": d.get("external_id"),
            "payload": d["payload"],
            "indexMode": d["index_mode"],
            "metadata": d.get("metadata") or {},
            "version": item.version,
            "schemaVersion": d.get("schema_version"),
            "createdAt": d["created_at"],
            "updatedAt": iso(item.updated_at),
        }

    def _seen(self, caller: Caller, item: Item | None) -> bool:
        return (
            item is not None
            and item.data.get("status") != "deleted"
            and can_see(item.data.get("scopes"), self.identity.read_lens(caller, None))
        )

    def _visible(self, caller: Caller, record_id: str) -> Item:
        item = self.records.get(caller.context_id, KIND, record_id) if record_id.startswith("rec_") else None
        if item is None or not self._seen(caller, item):
            raise NotFound(f"record {record_id!r} not found")
        return item

    def _at(self, caller: Caller, record_id: str, expected_version: int | None) -> Item:
        """The visible record, at the version the caller expects (when it names one)."""
        item = self._visible(caller, record_id)
        if expected_version is not None and item.version != expected_version:
            raise Conflict(
                f"record {record_id!r} is at version {item.version}, expected {expected_version}",
                code="version_conflict",
            )
        return item

    def get(self, caller: Caller, record_id: str) -> dict[str, Any]:
        return self.public(self._visible(caller, record_id))

    def _schema(self, context_id: str, type_: str) -> Schema:
        schema = self.schemas.get(context_id, type_)
        if schema.surface not in ("record", "identity"):
            raise InvalidInput(f"type {type_!r} is a {schema.surface} schema, not a record type")
        return schema

    def _item_entries(self, schema: Schema, item: Item) -> set[str]:
        return self._entries(schema, item.id, item.data)

    def _entries(self, schema: Schema, item_id: str, data: dict[str, Any]) -> set[str]:
        if data.get("status") == "deleted":
            return set()
        return lookups.entries(schema, data["payload"], data["created_at"], data.get("external_id"), item_id)

    def query(
        self,
        caller: Caller,
        type_: str,
        field: str | None,
        op: LookupOp | Literal["list"],
        value: Any,
        low: Any,
        high: Any,
        descending: bool,
        limit: int,
        token: str | None,
    ) -> dict[str, Any]:
        schema = self._schema(caller.context_id, type_)
        if field is not None and field.startswith("payload."):  # document_query's spelling, taken here too
            field = field.removeprefix("payload.")
        found, next_token = lookups.find(
            self.records,
            caller.context_id,
            LOOKUP,
            KIND,
            schema,
            field or lookups.CREATED.field,
            op,
            value,
            low,
            high,
            descending,
            limit,
            token,
            keep=lambda item: self._seen(caller, item) and item.data["type"] == type_,
            current=lambda item: self._entries(schema, item.id, item.data),
        )
        return {"items": [self.public(i) for i in found], "nextPageToken": next_token}

    # -- writing ----------------------------------------------------------------------------

    def _extid(self, caller: Caller, scopes: list[str], type_: str, external_id: str) -> str:
        if not external_id or len(external_id) > MAX_EXTERNAL_ID or any(ord(ch) < 32 for ch in external_id):
            raise InvalidInput(f"externalId must be 1 to {MAX_EXTERNAL_ID} characters, without control characters")
        return f"{tags_key(scopes)}|{type_}|{external_id}"

    def create(
        self,
        caller: Caller,
        type_: str,
        payload: dict[str, Any],
        external_id: str | None,
        index_mode: IndexMode | None,
        metadata: dict[str, Any] | None,
        scopes: list[list[str]] | None,
    ) -> dict[str, Any]:
        ctx = caller.context_id
        schema = self._schema(ctx, type_)
        schema.validate(payload)
        for lk in schema.lookups:
            lookups.check_value(lk.field, payload.get(lk.field))
        tags = self.identity.write_scopes(caller, scopes)
        ext_key = self._extid(caller, tags, type_, external_id) if external_id is not None else None

        def attempt() -> dict[str, Any]:
            pointer = self.records.get(ctx, EXTID, ext_key) if ext_key else None
            if pointer is not None:
                existing = self.records.get(ctx, KIND, pointer.data["record_id"])
                if existing is not None and existing.data.get("status") != "deleted":
                    if existing.data["payload"] != payload or existing.data["type"] != type_:
                        raise Conflict(
                            f"externalId {external_id!r} already names a {type_} record with another payload",
                            code="external_id_conflict",
                        )
                    return dict(self.public(existing), created=False)
            now = self.clock.now()
            record_id = "rec_" + new_id("r").partition(":")[2]
            data = {
                "id": record_id,
                "type": type_,
                "external_id": external_id,
                "payload": payload,
                "index_mode": index_mode or schema.index_mode,
                "metadata": metadata or {},
                "scopes": tags,
                "schema_version": schema.version,
                "created_at": iso(now),
                "status": "active",
            }
            writes = [Write(ctx, KIND, record_id, data, caller.actor, expected_version=0)]
            if ext_key:  # a stale pointer (its record deleted) is taken over, version-checked
                at = pointer.version if pointer is not None else 0
                writes.append(Write(ctx, EXTID, ext_key, {"record_id": record_id}, caller.actor, expected_version=at))
            writes += lookups.changes(ctx, LOOKUP, caller.actor, set(), self._entries(schema, record_id, data),
                                      KIND, record_id)  # fmt: skip
            item = self._commit(ctx, writes, data, now, data["index_mode"] != "none")
            return dict(self.public(item), created=True)

        return on_conflict(attempt, 3, self.sleep)

    def update(
        self,
        caller: Caller,
        record_id: str,
        payload: dict[str, Any] | None,
        expected_version: int | None,
        index_mode: IndexMode | None,
        metadata: dict[str, Any] | None,
    ) -> dict[str, Any]:
        ctx = caller.context_id

        def attempt() -> dict[str, Any]:
            item = self._at(caller, record_id, expected_version)
            schema = self._schema(ctx, item.data["type"])
            data = dict(item.data)
            if payload is not None:
                schema.validate(payload)
                for lk in schema.lookups:
                    lookups.check_value(lk.field, payload.get(lk.field))
                data |= {"payload": payload, "schema_version": schema.version}
            if index_mode is not None:
                data["index_mode"] = index_mode
            if metadata is not None:
                data["metadata"] = metadata
            if data == item.data:
                return self.public(item)  # nothing changes: no new version
            writes = [Write(ctx, KIND, record_id, data, caller.actor, expected_version=item.version)]
            old, new = self._entries(schema, record_id, item.data), self._entries(schema, record_id, data)
            writes += lookups.changes(ctx, LOOKUP, caller.actor, old, new, KIND, record_id)
            indexed = data["index_mode"] != "none" or item.data["index_mode"] != "none"
            return self.public(self._commit(ctx, writes, data, self.clock.now(), indexed))

        return on_conflict(attempt, 1 if expected_version is not None else ATTEMPTS, self.sleep)

    def delete(self, caller: Caller, record_id: str, expected_version: int | None) -> dict[str, Any]:
        ctx = caller.context_id

        def attempt() -> dict[str, Any]:
            item = self._at(caller, record_id, expected_version)
            now = self.clock.now()
            data = dict(item.data, status="deleted", deleted_at=iso(now))
            schema = self.schemas.find(ctx, item.data["type"])
            writes = [Write(ctx, KIND, record_id, data, caller.actor, expected_version=item.version)]
            if schema is not None:
                old = self._entries(schema, record_id, item.data)
                writes += lookups.changes(ctx, LOOKUP, caller.actor, old, set(), KIND, record_id)
            ext = item.data.get("external_id")
            if ext:
                key = f"{tags_key(item.data['scopes'])}|{item.data['type']}|{ext}"
                pointer = self.records.get(ctx, EXTID, key)
                if pointer is not None and pointer.data["record_id"] == record_id:
                    gone = Write(ctx, EXTID, key, {}, caller.actor, expected_version=pointer.version, remove=True)
                    writes.append(gone)
            written = self._commit(ctx, writes, data, now, item.data["index_mode"] != "none")
            return {"id": record_id, "deleted": True, "version": written.version}

        return on_conflict(attempt, 1 if expected_version is not None else ATTEMPTS, self.sleep)

    # -- the search index -------------------------------------------------------------------

    def _commit(self, ctx: str, writes: list[Write], data: dict[str, Any], now: Any, indexed: bool) -> Item:
        """The writes, with the index job that finishes them after a crash and the graph's job; then the index,
        at once (`engram.kernel.unit_of_work`). A record that neither was nor becomes searchable (`indexMode` none) has
        no index work, and no job."""
        if not indexed:
            return self.records.transact(writes, now)[0]
        names = graph.extraction_job(self.queue, ctx, "record", data["id"], now)  # its names, in the graph too
        uow = UnitOfWork(self.records, self.queue)
        net = (INDEX_JOB, {"context_id": ctx, "ids": [data["id"]]})
        return uow.commit(writes, now, reindex=lambda items: self._reindex(ctx, items[:1]), net=net, jobs=[names])[0]

    def _index_doc(self, item: Item, vector: Any) -> IndexDoc:
        d = item.data
        meta: dict[str, str | int | float | bool] = {
            "record_id": item.id,
            "type": d["type"],
            "title": title_of(d),
            "created_at": d["created_at"],
            "folder_id": "",
            "external_id": d.get("external_id") or "",
        }
        meta |= {f"m.{k}": v for k, v in (d.get("metadata") or {}).items() if isinstance(v, str | int | float | bool)}
        return IndexDoc(item.context_id, KIND, item.id, search_text(d), vector, d["scopes"], None, None, meta)

    def _reindex(self, ctx: str, items: Sequence[Item]) -> None:
        gone = [i.id for i in items if i.data.get("status") == "deleted" or i.data["index_mode"] == "none"]
        keep = [i for i in items if i.id not in gone]
        hybrid = [i for i in keep if i.data["index_mode"] == "hybrid"]
        vectors: dict[str, Any] = {}
        if hybrid and self.embedder is not None:
            with embedding_errors():
                made = self.embedder.embed([search_text(i.data) for i in hybrid])
            vectors = dict(zip([i.id for i in hybrid], made, strict=True))
        if keep:
            self.index.upsert([self._index_doc(i, vectors.get(i.id)) for i in keep])
        if gone:
            self.index.delete(ctx, gone)

    def index_job(self, payload: dict[str, Any]) -> None:
        ctx = payload["context_id"]
        found = self.records.get_many(ctx, KIND, payload["ids"])
        self._reindex(ctx, list(found.values()))

    # -- identities -------------------------------------------------------------------------

    def identities(self, caller: Caller, field: str, value: Any, types: Sequence[Schema]) -> list[Item]:
        """Visible live records of these identity types whose `field` (a lookup field, or externalId) is
        `value`: one exact lookup per type."""
        out: list[Item] = []
        for schema in types:
            found, _ = lookups.find(
                self.records, caller.context_id, LOOKUP, KIND, schema, field, "exact", value, None, None, False, 10,
                None, keep=lambda i: self._seen(caller, i),
                current=partial(self._item_entries, schema),
            )  # fmt: skip
            out += found
        return out
