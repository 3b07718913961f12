"""The knowledge family's containers: collections (Cortex: flat named groups) and folders (Vectros: a tree).
A document belongs to at most one of each, and both are search filters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engram.families.knowledge.base import DocumentsBase
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, new_id
from engram.kernel.errors import Conflict, InvalidInput, NotFound
from engram.kernel.ports import Item, Write, scan
from engram.kernel.scopes import can_see


class Containers(DocumentsBase):
    # -- collections and folders ----------------------------------------------------------
    #
    # Both carry scopes: a collection those of everything put in it (and of whoever created it), a folder
    # its creator's. A caller sees one it may see (engram.kernel.scopes.can_see) or that holds a document it may
    # see. Deleting one that holds anything the caller cannot see is refused without saying what, and no
    # delete leaves a document pointing at a collection or folder that is gone.

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
