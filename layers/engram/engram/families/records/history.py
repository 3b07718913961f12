"""Version history (Vectros' `version_history`) of records and documents: every create, update and delete,
with its version, actor (the key's principal and key id), time and an RFC 6902 JSON Patch (the `jsonpatch`
library) from the version before, newest first, a page at a time.

The patch is over what a client sees of the object (its public fields: no storage keys, no scopes), so a
diff never shows what the caller could not read. A deleted object keeps its history: the caller who could
see it reads it still; anyone else gets the same 404 as for an id that never existed.
"""

from __future__ import annotations

from typing import Any

from engram.kernel.caller import Caller
from engram.kernel.clock import iso
from engram.kernel.errors import InvalidInput, NotFound
from engram.kernel.ports import Item
from engram.kernel.scopes import can_see
from engram.kernel.services import BaseService

# What a document's data holds for storage, not for its reader (documents' `_public` leaves them out too).
PRIVATE_DOCUMENT_FIELDS = frozenset({"blob_key", "scopes", "hash_key", "extid_key", "chunk_prefix"})
_VOLATILE = frozenset({"updated_at", "stage", "error"})  # changes every write says by itself
KINDS = {"rec_": "record", "doc:": "document", "doc_": "document"}


def actor_of(actor: str) -> dict[str, str | None]:
    role, _, key_id = actor.partition(":")
    return {"principal": role, "keyId": key_id or None}


def view(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The fields of a version a client sees, as a diff compares them."""
    if kind == "record":
        return {
            "type": data["type"],
            "externalId": data.get("external_id"),
            "payload": data["payload"],
            "indexMode": data["index_mode"],
            "metadata": data.get("metadata") or {},
            "deleted": data.get("status") == "deleted",
        }
    return {k: v for k, v in data.items() if k not in PRIVATE_DOCUMENT_FIELDS and k not in _VOLATILE}


def operation(item: Item) -> str:
    if item.data.get("status") == "deleted":
        return "delete"
    return "create" if item.version == 1 else "update"


class History(BaseService):
    def versions(self, caller: Caller, object_id: str, limit: int, token: str | None) -> dict[str, Any]:
        import jsonpatch

        kind = next((k for prefix, k in KINDS.items() if object_id.startswith(prefix)), None)
        latest = self.records.get(caller.context_id, kind, object_id) if kind else None
        if latest is None or not can_see(latest.data.get("scopes"), self.identity.read_lens(caller, None)):
            raise NotFound(f"no record or document {object_id!r}")
        assert kind is not None
        before = None
        if token is not None:
            if not token.isdigit() or not 1 < int(token) <= latest.version:
                raise InvalidInput("pageToken does not continue this history", code="invalid_page_token")
            before = int(token)
        # one version more than the page: the oldest one's diff is from it
        page = self.records.history_page(caller.context_id, kind, object_id, before, limit + 1)
        shown = page[:limit]
        out = []
        for n, item in enumerate(shown):
            older = page[n + 1].data if n + 1 < len(page) else None
            patch = jsonpatch.make_patch(view(kind, older) if older is not None else {}, view(kind, item.data))
            out.append(
                {
                    "version": item.version,
                    "operation": operation(item),
                    "actor": actor_of(item.actor),
                    "at": iso(item.updated_at),
                    "diff": patch.patch,
                }
            )
        more = bool(shown) and shown[-1].version > 1
        return {
            "id": object_id,
            "kind": kind,
            "version": latest.version,
            "versions": out,
            "nextPageToken": str(shown[-1].version) if more else None,
        }
