"""Erasure requests (issue #27): preview, a durable job, a signed receipt, a check afterwards.

`request` answers a preview (what every family holds of the subject, by store and kind) or queues the erasure:
a `erasure` record and its job, committed together. The job runs every family's eraser in turn
(`engram.trust.erasure`), saving as it goes what the units it finished erased, so a worker killed half way and
restarted finishes the rest and the counts hold; then it signs a receipt (`engram.trust.receipts`, the deployment's
Ed25519 key) and keeps it on the request. An erasure of a subject some family without an eraser holds objects of
is refused before anything is erased: nothing is left behind and called erased. `verify` looks again, in every
family, and says what is left (nothing, when the erasure did its work).

The receipt's key: an Ed25519 private key made on first use and kept in the record store (`_system`), so every
process and function of a deployment signs with the same key; its public half is published
(`current_identity`, `/.well-known/engram-receipt-key`).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engram.families.identity import ERASURE_JOB as JOB
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, new_id, parse_time
from engram.kernel.errors import Conflict, Forbidden, InvalidInput, NotFound
from engram.kernel.kinds import Kinds
from engram.kernel.ports import Item, SearchMode, SearchQuery, Write
from engram.kernel.queue import alive, past_hand_over, this_process
from engram.kernel.retry import on_conflict
from engram.kernel.scan import EPOCH, every
from engram.kernel.scopes import can_see, covers
from engram.kernel.services import BaseService
from engram.kernel.unit_of_work import UnitOfWork
from engram.search.rules import query_vector
from engram.trust.erasure import (
    Counts,
    Eraser,
    Subject,
    Unit,
    add,
    apply,
    digest,
    distinctive_words,
    found,
    owned_objects,
    receipt_body,
    total,
)
from engram.trust.receipts import Signer, verify

if TYPE_CHECKING:
    from engram.wiring import Engram

REQUEST, KEY = "erasure", "receiptkey"
ROUNDS = 5  # looks after the erasure for writes that raced it
SAVE_EVERY = 1.0  # seconds: how often a run saves what it has erased so far
SAVE_AT = 100  # ... and after any unit that erased this many objects or more (a batch)
LEASE = timedelta(seconds=60)  # a runner's hold on a request, renewed with each save
MODES: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")  # the modes a look for traces searches in
SYSTEM = "_system"  # the context of deployment-wide records (no key can name it: not a valid context id)


class ErasureService(BaseService):
    def __init__(self, root: Engram) -> None:
        super().__init__(root.kernel)
        self.root = root
        self._signer: Signer | None = None
        self._lock = threading.Lock()

    # -- the deployment's key -----------------------------------------------------------------------------

    def signer(self) -> Signer:
        with self._lock:
            if self._signer is None:
                item = self.records.get(SYSTEM, KEY, "ed25519")
                if item is None:
                    fresh = base64.b64encode(Signer.new_private_key()).decode()
                    with contextlib.suppress(Conflict):  # another process made it first: use that one
                        self.records.transact(
                            [Write(SYSTEM, KEY, "ed25519", {"private": fresh}, "system", 0)], self.clock.now()
                        )
                    item = self.records.get(SYSTEM, KEY, "ed25519")
                assert item is not None
                self._signer = Signer(base64.b64decode(item.data["private"]))
            return self._signer

    def public_key(self) -> str:
        return self.signer().public_key

    # -- subjects and erasers -------------------------------------------------------------------------------

    def subject(
        self, caller: Caller, scope: str | None, external_id: str | None, ids: list[str] | None = None
    ) -> Subject:
        """The subject a management key may erase: a scope path, or a principal's ownership path, inside the
        key's grant; or the ids of objects the key sees (an id it does not see is not found, as if absent)."""
        if sum(x is not None for x in (scope, external_id, ids)) != 1:
            raise InvalidInput("name the subject by scope, by externalId or by ids (one of them)")
        if ids is not None:
            # of a shared object (an entity, an edge) the key takes its own parts, those inside its grant
            subject = Subject(ids=tuple(dict.fromkeys(ids)), region=tuple(caller.principal.grant))
            grant = [[g] for g in caller.principal.grant]
            seen = set()
            for object_ in owned_objects(
                self.records, self.kinds, caller.context_id, subject, [n for n, _ in self.erasers()]
            ):
                kind, _, id_ = object_.partition(":")
                item = self.records.get(caller.context_id, kind, id_)
                if item is not None and can_see(item.data.get("scopes"), grant):
                    seen.add(id_)
            missing = [i for i in subject.ids if i not in seen]
            if missing:
                raise NotFound(f"no object {missing[0]!r}" + (f" (and {len(missing) - 1} more)" if missing[1:] else ""))
            return subject
        if external_id is not None:
            from engram.families.identity import IdentityServices

            principals = self.root.services(IdentityServices).principals
            scope = str(principals.lookup(caller, external_id, None, None, None)["path"])
        assert scope is not None
        if not any(covers(g, scope) for g in caller.principal.grant):
            raise Forbidden(f"{scope!r} is outside this key's grant", code="scope_not_granted")
        return Subject(scope)

    def erasers(self) -> list[tuple[str, Eraser | None]]:
        """(family, its eraser or None) for every family that owns scoped objects, in registry order."""
        out: list[tuple[str, Eraser | None]] = []
        for fam in self.root.families():
            if not any(k.access == "scoped" for k in fam.kinds.values()):
                continue
            eraser: Eraser | None = None
            if fam.eraser is not None:
                eraser = self.root.bound(fam, fam.eraser)
            out.append((fam.name, eraser))
        return out

    def _survey(self, ctx: str, subject: Subject) -> tuple[dict[str, Counts], list[str]]:
        """What each family holds of the subject, and the families holding some without an eraser."""
        by_family: dict[str, Counts] = {}
        unsupported: list[str] = []
        for name, eraser in self.erasers():
            counts = (
                apply(eraser(ctx, subject), True)
                if eraser is not None
                else found(self.records, self.kinds, ctx, subject, name)
            )
            if total(counts):
                by_family[name] = counts
                if eraser is None:
                    unsupported.append(name)
        return by_family, unsupported

    # -- requests ------------------------------------------------------------------------------------------

    def request(self, caller: Caller, subject: Subject, preview: bool) -> dict[str, Any]:
        ctx = caller.context_id
        by_family, unsupported = self._survey(ctx, subject)
        answer: dict[str, Any] = {"subject": subject.describe(), "found": by_family}
        if preview:
            return dict(answer, preview=True, unsupported=unsupported)
        if unsupported:
            raise InvalidInput(
                f"cannot erase {subject.scope or 'these objects'!r} yet: {', '.join(unsupported)} hold(s) its "
                "objects and cannot erase them; nothing was erased",
                code="erasure_unsupported",
                details={"families": unsupported},
            )
        now = self.clock.now()
        request_id = "er_" + new_id("e").partition(":")[2].lower()
        data: dict[str, Any] = {
            "request_id": request_id,
            "context_id": ctx,
            "subject": subject.describe(),
            "requested_by": caller.principal.key_id,
            "status": "pending",
            "requested_at": iso(now),
            "done": [],
            "erased": {},
        }
        job = self.queue.job(JOB, {"context_id": ctx, "request_id": request_id}, now)
        UnitOfWork(self.records, self.queue).commit([Write(ctx, REQUEST, request_id, data, caller.actor, 0)], now,
                                                     jobs=[job])  # fmt: skip
        return dict(answer, preview=False, request_id=request_id, status="pending")

    def erasure_job(self, payload: dict[str, Any]) -> None:
        try:
            self.run(payload["context_id"], payload["request_id"])
        except Busy:  # another runner has it: look again once its lease would have run out (not a failed try)
            job = self.queue.job(JOB, payload, self.clock.now(), delay=LEASE)
            UnitOfWork(self.records, self.queue).commit([], self.clock.now(), jobs=[job])

    def run(self, ctx: str, request_id: str, wait: bool = False) -> dict[str, Any]:
        """Erase, family after family, saving progress; then sign the receipt. One runner at a time (a lease on
        the request, renewed with each save): another runner of the same request (a worker and a join, a message
        delivered twice) gets `Busy` — its job is tried again later — or, with `wait`, waits for the request to
        end; a runner that died leaves its lease to run out, and the next goes on from what it saved."""
        runner = new_id("run")
        while True:
            try:
                return on_conflict(lambda: self._run(ctx, request_id, runner))
            except Busy:
                if not wait:
                    raise
                time.sleep(0.2)
            except Exception:
                self._release(ctx, request_id, runner)
                raise

    def _release(self, ctx: str, request_id: str, runner: str) -> None:
        """A runner that failed lets go of the request at once (the job's next try takes it)."""
        item = self.records.get(ctx, REQUEST, request_id)
        if item is not None and (item.data.get("runner") or {}).get("id") == runner:
            data = {k: v for k, v in item.data.items() if k != "runner"}
            with contextlib.suppress(Conflict):
                self._save(ctx, data, item.version)

    def _run(self, ctx: str, request_id: str, runner: str) -> dict[str, Any]:
        item = self.records.get(ctx, REQUEST, request_id)
        if item is None:
            return {}
        data = dict(item.data)
        if data["status"] in ("done", "refused"):
            return data
        held, now = data.get("runner"), self.clock.now()
        if (
            held
            and held["id"] != runner
            and (until := parse_time(held["until"])) is not None
            and until > now
            and alive(held.get("owner"))
        ):  # a runner's lease holds until it runs out, or its process (on this machine) is gone
            raise Busy(f"erasure {request_id!r} is being run by another runner until {held['until']}")
        data["runner"] = {"id": runner, "until": iso(now + LEASE), "owner": this_process()}
        item = self._save(ctx, data, item.version)  # the claim: a runner that read the same version conflicts
        subject = Subject.of(data["subject"])
        data.setdefault("started_at", iso(self.clock.now()))
        blocked = [
            n for n, e in self.erasers() if e is None and total(found(self.records, self.kinds, ctx, subject, n))
        ]
        if blocked:  # objects arrived, since the request, where no eraser reaches: erase nothing, say so
            data.update(status="refused", refused_because={"families": blocked}, finished_at=iso(self.clock.now()))
            data.pop("runner")
            self._save(ctx, data, item.version)
            return data
        erasers = [(name, eraser) for name, eraser in self.erasers() if eraser is not None]
        objects = owned_objects(self.records, self.kinds, ctx, subject, [name for name, _ in erasers])
        # the words a search for a trace asks, from the content itself: held here, never stored (a run that
        # follows another reads what is left: each run looks for the traces of what it erased)
        words = distinctive_words(self.records, ctx, objects, lambda stems: self.index.term_counts(ctx, stems)[1])
        blob_keys = self._blob_keys(ctx, objects)
        if "objects_sha256" not in data:  # what the receipt names (hashed), listed once, before anything goes
            data.update(objects=len(objects), objects_sha256=digest(objects), status="running")
            item = self._save(ctx, data, item.version)
        progress = _Progress(self, ctx, data, item)
        try:
            with progress.kept():  # a unit longer than the lease keeps it
                self._families(ctx, subject, erasers, progress)
        except _HandOver:  # out of time (the Lambda worker): what is done is saved, the rest is a job of its own
            gone = self._gone(ctx, objects)  # this run's share: its traces looked for while its words are known
            self._looked(data, ctx, gone, words, {o: blob_keys[o] for o in gone if o in blob_keys})
            job = self.queue.job(JOB, {"context_id": ctx, "request_id": request_id}, self.clock.now())
            data.pop("runner")  # the continuation's to take
            write = Write(ctx, REQUEST, request_id, data, "erasure", progress.version)
            UnitOfWork(self.records, self.queue).commit([write], self.clock.now(), jobs=[job])
            return data
        self._looked(data, ctx, objects, words, blob_keys)
        self.records.expunge()  # deleted content out of logs and segments too
        self.index.expunge()
        if self.root.query_vectors is not None:  # queries kept in memory may have named the subject
            self.root.query_vectors.forget()
        data["finished_at"] = iso(self.clock.now())
        data["status"] = "done"
        data.pop("last_error", None)
        data.pop("runner")
        data["receipt"] = self.signer().sign(receipt_body(data))
        progress.save()
        return data

    def _families(self, ctx: str, subject: Subject, erasers: list[tuple[str, Eraser]], progress: _Progress) -> None:
        """Each family's units in turn, then the looks for writes that raced them."""
        data = progress.data
        for name, eraser in erasers:
            if name in data["done"]:
                continue
            try:
                apply(eraser(ctx, subject), False, progress.done)
            except _HandOver:
                raise
            except Exception as exc:  # the job is tried again; meanwhile the request says why it has not finished
                data["last_error"] = f"{name}: {exc}"[:500]  # and keeps what the units that finished erased
                with contextlib.suppress(Conflict):
                    progress.save()
                raise
            data["done"] = [*data["done"], name]
            data["status"] = "running"
            progress.save()
        # A write for the subject that landed while the families were erased: another look, and another round,
        # until a look finds nothing — the erasure ends there, and a write that lands later comes after it.
        for _ in range(ROUNDS):
            left, _ = self._survey(ctx, subject)
            if not left:
                break
            for name, eraser in erasers:
                if name in left:
                    apply(eraser(ctx, subject), False, progress.done)

    def _blob_keys(self, ctx: str, objects: list[str]) -> dict[str, list[str]]:
        """The blobs every version of each of the subject's objects refers to (documents, files), to look for
        after: object -> its blob keys."""
        keys: dict[str, list[str]] = {}
        holding = _blob_kinds(self.kinds)
        for object_ in objects:
            kind, _, id_ = object_.partition(":")
            for version in self.records.history(ctx, kind, id_) if kind in holding else ():
                if isinstance(version.data.get("blob_key"), str):
                    keys.setdefault(object_, []).append(version.data["blob_key"])
        return keys

    def _gone(self, ctx: str, objects: list[str]) -> list[str]:
        """Those of the objects no longer stored."""
        by_kind: dict[str, list[str]] = {}
        for object_ in objects:
            kind, _, id_ = object_.partition(":")
            by_kind.setdefault(kind, []).append(id_)
        stored = {f"{k}:{i}" for k, ids in by_kind.items() for i in self.records.get_many(ctx, k, ids, now=EPOCH)}
        return [o for o in objects if o not in stored]

    def _looked(self, data: dict[str, Any], ctx: str, objects: list[str], words: list[str],
                blob_keys: dict[str, list[str]]) -> None:  # fmt: skip
        """A run's looks for traces of what it erased (the index, blob storage), added to the request's."""
        found = dict(self._traces(ctx, objects, words), blobs=self._blobs_left(ctx, sorted({
            k for keys in blob_keys.values() for k in keys})))  # fmt: skip
        before = data.get("traces")
        if before:  # an earlier run's looks, for its share
            found = {"words": before["words"] + found["words"],
                     "modes": sorted(set(before["modes"]) | set(found["modes"]), key=MODES.index),
                     "found": before["found"] + found["found"], "left": before["left"] + found["left"],
                     "blobs": {k: before["blobs"][k] + found["blobs"][k] for k in found["blobs"]}}  # fmt: skip
        data["traces"] = found

    def _blobs_left(self, ctx: str, keys: list[str]) -> dict[str, int]:
        """The look in blob storage: each blob the subject's objects referred to, gone — unless another scope's
        file still refers to the same bytes (content-addressed workspace blobs), which is counted apart."""
        left = [k for k in keys if self.blobs.exists(k)]
        shared: set[str] = set()
        if left:
            for kind in _blob_kinds(self.kinds):
                for item in every(self.records, ctx, kind):
                    shared |= {str(v.data.get("blob_key")) for v in self.records.history(ctx, kind, item.id)}
        return {"checked": len(keys), "left": sum(1 for k in left if k not in shared),
                "kept_shared": sum(1 for k in left if k in shared)}  # fmt: skip

    def _save(self, ctx: str, data: dict[str, Any], version: int) -> Item:
        """The request's progress, written over the version the job read (another runner's write: a conflict)."""
        write = Write(ctx, REQUEST, data["request_id"], data, "erasure", version)
        return self.records.transact([write], self.clock.now())[0]

    def _traces(self, ctx: str, objects: list[str], words: list[str]) -> dict[str, Any]:
        """Search the index in every mode, over every kind and scope, for the subject's distinctive words: a hit
        that is one of the erased objects (or a part of one: a chunk, a window) is a trace. Traces found are
        taken out and looked for again; the receipt says what the last look found."""
        gone = {o.partition(":")[2] for o in objects}
        if not words or not gone:
            return {"words": len(words), "modes": [], "found": 0, "left": 0}
        text = " ".join(words)
        vector = query_vector(self.embedder, text, ranks=False)
        modes: list[SearchMode] = list(MODES) if vector is not None else ["bm25"]

        def look() -> set[str]:
            hits: set[str] = set()
            for mode in modes:
                query = SearchQuery(ctx, text, vector, mode, 100)  # no kinds, no visibility: everything
                hits |= {h.id for h in self.index.search(query, self.clock.now()) if h.id.split("#")[0] in gone}
            return hits

        found = look()
        if found:
            self.index.delete(ctx, sorted(found))
        return {"words": len(words), "modes": modes, "found": len(found), "left": len(look()) if found else 0}

    def status(self, caller: Caller, request_id: str) -> dict[str, Any]:
        """A request as its key sees it: one it made, or one a key it governs made (the context's manager: any);
        another is not found, as if absent — its subject and counts are another region's."""
        item = self.records.get(caller.context_id, REQUEST, request_id)
        keys = self.identity.governed(caller) if item is not None else None
        if item is None or (keys is not None and item.data.get("requested_by") not in keys):
            raise NotFound(f"no erasure request {request_id!r}", code="not_found")
        d = item.data
        out = {k: d.get(k) for k in ("request_id", "subject", "status", "requested_at", "erased")}
        if d.get("last_error"):  # a run that failed: the job is tried again
            out["last_error"] = d["last_error"]
        return dict(out, receipt=d.get("receipt"), verification=d.get("verification"))

    def verify(self, caller: Caller, request_id: str) -> dict[str, Any]:
        """Every family looked at again for the subject: what is left (nothing, after an erasure that did its
        work), and whether the receipt's signature holds with this deployment's key."""
        state = self.status(caller, request_id)
        if state["status"] != "done":
            raise Conflict(f"erasure {request_id!r} is {state['status']}: verify it when it is done", code="not_done")
        left, _ = self._survey(caller.context_id, Subject.of(state["subject"]))
        signed, why = verify(state["receipt"], self.public_key())
        result = {
            "request_id": request_id,
            "checked_at": iso(self.clock.now()),
            "remaining": left,
            "clean": not left,
            "receipt_valid": signed,
            "receipt_check": why,
        }

        def attach() -> None:  # kept with the request and its receipt: the last check of each
            item = self.records.get(caller.context_id, REQUEST, request_id)
            assert item is not None
            self._save(caller.context_id, dict(item.data, verification=result), item.version)

        on_conflict(attach)
        return result


def _blob_kinds(kinds: Kinds) -> list[str]:
    """The kinds whose versions name blobs (documents, files)."""
    return sorted(name for name, kind in kinds.items() if kind.blobs)


class Busy(RuntimeError):
    """Another runner holds the request's lease (the job that meets it queues itself again for later)."""


class _HandOver(Exception):
    """The run is out of time: it stops after the unit it finished, and a job of its own does the rest."""


class _Progress:
    """What a run has erased, kept on the request: each finished unit's counts added to `erased`, saved after
    each batch, at least every `SAVE_EVERY` seconds, and at each family's end (a run killed outright loses at
    most the counts of the small units of its last second; one that fails, or runs out of time, saves them
    first). Each save renews the run's lease on the request; while the families run (`kept`), a unit that takes
    longer than a quarter of the lease has what was last saved written again, so no other runner takes over."""

    def __init__(self, service: ErasureService, ctx: str, data: dict[str, Any], item: Item) -> None:
        self.service, self.ctx, self.data, self.version = service, ctx, data, item.version
        self.data["erased"] = {k: dict(v) for k, v in data["erased"].items()}
        self.saved = time.monotonic()
        self._last = copy.deepcopy(self.data)  # what the request holds: the keeper writes only this again
        self._lock = threading.Lock()  # one write at a time: the run's, or the keeper's

    def done(self, unit: Unit) -> None:
        add(self.data["erased"], unit.counts)
        if past_hand_over():
            raise _HandOver
        if total(unit.counts) >= SAVE_AT or time.monotonic() - self.saved >= SAVE_EVERY:
            self.save()

    def save(self) -> None:
        with self._lock:
            self._write(self.data)
            self._last = copy.deepcopy(self.data)

    def _write(self, data: dict[str, Any]) -> None:
        if "runner" in data:  # the lease renewed with each save
            data["runner"] = dict(data["runner"], until=iso(self.service.clock.now() + LEASE))
        self.version = self.service._save(self.ctx, data, self.version).version
        self.saved = time.monotonic()

    @contextlib.contextmanager
    def kept(self) -> Iterator[None]:
        """The lease renewed while the block runs: what was last saved, written again whenever no save came for a
        quarter of the lease. A write that fails (another runner has the request after all) stops the keeper; the
        run's own next save fails the same way."""
        every = LEASE.total_seconds() / 4
        stop = threading.Event()

        def keep() -> None:
            while not stop.wait(max(0.01, every - (time.monotonic() - self.saved))):
                with self._lock:
                    if time.monotonic() - self.saved < every:
                        continue
                    try:
                        self._write(self._last)
                    except Exception:  # the run meets it at its own next save
                        return

        keeper = threading.Thread(target=keep, name="erasure-lease", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join()
