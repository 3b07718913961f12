"""A whole context's export and import as a deployment's job (`context_export`, `context_import`,
`context_transfer_status`): `engram.transfer.archive` run by the queue's worker, the file kept in the blob store.

Only the context's manager starts one (a key governing the whole context, `IdentityService.governs`): an export
holds every scope's objects, and an import writes into every scope. An import reads a file this deployment holds
— an export it made (`transfer_id`) or the bytes the call sends (`bytes_base64`) — never a URL: nothing a caller
sends makes the server open a connection."""

from __future__ import annotations

import base64
import binascii
import io
import tempfile
from typing import TYPE_CHECKING, Any

from engram.families.identity import EXPORT_JOB, IMPORT_JOB
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, new_id
from engram.kernel.errors import Forbidden, InvalidInput, NotFound
from engram.kernel.ports import Write
from engram.kernel.services import BaseService
from engram.kernel.unit_of_work import UnitOfWork

if TYPE_CHECKING:
    from engram.wiring import Engram

TRANSFER = "transfer"


class Transfers(BaseService):
    def __init__(self, root: Engram) -> None:
        super().__init__(root.kernel)
        self.root = root

    def _manager(self, caller: Caller) -> None:
        if not self.identity.governs(caller, None):
            raise Forbidden("only the context's manager (a key governing the whole context) moves it whole",
                            code="not_context_manager")  # fmt: skip

    def _start(self, caller: Caller, kind: str, job: str, extra: dict[str, Any]) -> dict[str, Any]:
        ctx, now = caller.context_id, self.clock.now()
        transfer_id = "tx_" + new_id("t").partition(":")[2].lower()
        data = {"transfer_id": transfer_id, "kind": kind, "status": "queued", "requested_by": caller.principal.key_id,
                "requested_at": iso(now), **extra}  # fmt: skip
        queued = self.queue.job(job, {"context_id": ctx, "transfer_id": transfer_id}, now)
        UnitOfWork(self.records, self.queue).commit([Write(ctx, TRANSFER, transfer_id, data, caller.actor, 0)], now,
                                                     jobs=[queued])  # fmt: skip
        return {"transfer_id": transfer_id, "kind": kind, "status": "queued"}

    def export(self, caller: Caller, audit: bool) -> dict[str, Any]:
        self._manager(caller)
        return self._start(caller, "export", EXPORT_JOB, {"audit": audit})

    def import_(self, caller: Caller, transfer_id: str | None, bytes_base64: str | None) -> dict[str, Any]:
        self._manager(caller)
        if (transfer_id is None) == (bytes_base64 is None):
            raise InvalidInput("give transfer_id (an export made here) or bytes_base64, one of them")
        if transfer_id is not None:
            done = self.status(caller, transfer_id)
            if done["kind"] != "export" or done["status"] != "done":
                raise InvalidInput(f"{transfer_id} is not a finished export", details={"field": "transfer_id"})
            made = self.records.get(caller.context_id, TRANSFER, transfer_id)
            assert made is not None  # `status` found it
            key = str(made.data["blob"])
        else:
            assert bytes_base64 is not None
            try:
                raw = base64.b64decode(bytes_base64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvalidInput("bytes_base64 is not base64", details={"field": "bytes_base64"}) from exc
            if raw[:2] != b"\x1f\x8b":
                raise InvalidInput("not an Engram export (gzip of JSON Lines)", details={"field": "bytes_base64"})
            key = f"{caller.context_id}/transfers/{new_id('up').partition(':')[2].lower()}.jsonl.gz"
            self.blobs.put(key, raw, "application/gzip")
        return self._start(caller, "import", IMPORT_JOB, {"blob": key})

    def status(self, caller: Caller, transfer_id: str) -> dict[str, Any]:
        self._manager(caller)
        item = self.records.get(caller.context_id, TRANSFER, transfer_id)
        if item is None:
            raise NotFound(f"no transfer {transfer_id!r}", code="not_found")
        d = item.data
        out = {k: d.get(k) for k in ("transfer_id", "kind", "status", "requested_at", "finished_at", "counts", "error")}
        if d["kind"] == "export" and d["status"] == "done":
            out["bytes"] = d.get("bytes")
            out["download_url"] = self.blobs.url(d["blob"])
        return out

    def _save(self, ctx: str, transfer_id: str, **changes: Any) -> None:
        item = self.records.get(ctx, TRANSFER, transfer_id)
        assert item is not None
        self.records.transact([Write(ctx, TRANSFER, transfer_id, {**item.data, **changes}, "worker", item.version)],
                              self.clock.now())  # fmt: skip

    def export_job(self, payload: dict[str, Any]) -> None:
        from engram.transfer.archive import export

        ctx, tid = payload["context_id"], payload["transfer_id"]
        item = self.records.get(ctx, TRANSFER, tid)
        if item is None or item.data["status"] == "done":
            return  # delivered twice
        self._save(ctx, tid, status="running")
        with tempfile.TemporaryFile() as spool:  # on disk while it is written: memory stays flat
            counts = export(self.root, ctx, spool, audit=bool(item.data.get("audit")))
            spool.seek(0)
            data = spool.read()
        key = f"{ctx}/transfers/{tid}.jsonl.gz"
        self.blobs.put(key, data, "application/gzip")
        kept = {k: v for k, v in counts.as_dict().items() if k in ("objects", "blobs", "docs", "audit")}
        self._save(ctx, tid, status="done", blob=key, bytes=len(data), finished_at=iso(self.clock.now()), counts=kept)

    def import_job(self, payload: dict[str, Any]) -> None:
        from engram.transfer.archive import load

        ctx, tid = payload["context_id"], payload["transfer_id"]
        item = self.records.get(ctx, TRANSFER, tid)
        if item is None or item.data["status"] == "done":
            return
        self._save(ctx, tid, status="running")
        try:
            counts = load(self.root, io.BytesIO(self.blobs.get(item.data["blob"])), into=ctx, trusted=False)
        except InvalidInput as exc:
            self._save(ctx, tid, status="failed", error=exc.message, finished_at=iso(self.clock.now()))
            return
        kept = {k: v for k, v in counts.as_dict().items() if k in ("objects", "written", "blobs", "docs", "skipped")}
        self._save(ctx, tid, status="done", finished_at=iso(self.clock.now()), counts=kept)
