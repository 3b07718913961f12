"""Memory's eraser (`engram.trust.erasure`): a subject's turns, attributes and sessions, every version of each, their
slots, their index documents, and recall's cached answers of the context. What the turns fed the entity graph is
the entities family's to erase.

Order, so that a job that dies half way and runs again finds what is left: the index documents first, then the
slots (found through their attributes), then the records — a record still there leads back to everything of
it.

Its reindexer (`reindex`, `engram.search.reindex`) names the jobs that index the family's objects
again from the store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from engram.families.memory import INDEX_JOB
from engram.families.memory.base import MemoryBase
from engram.families.memory.plan import session_key
from engram.kernel.ports import Item, Write
from engram.kernel.scan import every
from engram.search.reindex import Keep, Reindex, batches, object_key
from engram.trust.erasure import Counts, Subject, Unit, batched, mine

OWNED = ("turn", "attribute", "session")
INDEXED = ("turn", "attribute")


class Erasing(MemoryBase):
    def reindex(self, ctx: str, keep: Keep) -> Iterator[Reindex]:
        """The kept turns and attributes indexed again (`engram.search.reindex`), by the write's safety-net job; each
        turn named with the one before it in its session (by `seq`), whose text its vector was made with."""

        def place(turn: Item, back: int = 0) -> tuple[str, int] | None:
            seq = turn.data.get("seq")  # older turns have none: no turn before them is named
            if not isinstance(seq, int):
                return None
            return session_key(turn.data["session_id"], turn.data["scopes"]), seq - back

        turns = {p: t.id for t in every(self.records, ctx, "turn") if (p := place(t)) is not None}
        for kind in INDEXED:
            for batch in batches(self.records, ctx, kind, keep):
                after = {i.id: turns[p] for i in batch if kind == "turn" and (p := place(i, 1)) in turns}
                payload = {"context_id": ctx, "items": [[kind, i.id] for i in batch], "after": after}
                yield Reindex(INDEX_JOB, payload, {object_key(i): (i.version, (i.id,)) for i in batch})

    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        found = {kind: mine(self.records, ctx, kind, subject) for kind in OWNED}
        attributes = set(found["attribute"])
        slots: dict[str, list[str]] = {}
        for s in every(self.records, ctx, "slot"):
            if s.data.get("attribute_id") in attributes:
                slots.setdefault(str(s.data["attribute_id"]), []).append(s.id)

        def their_slots(batch: list[str]) -> tuple[Counts, Callable[[], object]]:
            ids = [slot for a in batch for slot in slots.get(a, ())]
            return {"records": {"slot": len(ids)}}, partial(self.records.purge_many, ctx, "slot", ids)

        for kind in OWNED:
            yield from batched(self.records, ctx, kind, found[kind], self.index.delete if kind in INDEXED else None,
                               their_slots if kind == "attribute" else None)  # fmt: skip
        if any(found.values()):
            yield Unit({}, lambda: self._forget_answers(ctx))

    def _forget_answers(self, ctx: str) -> None:
        with self._lock:  # recall's answers of this context may quote what went
            for key in [k for k in self._cache if k[0] == ctx]:
                del self._cache[key]

    def expire_job(self, payload: dict[str, Any]) -> None:
        """A memory whose time is up (stored with `ttl_seconds` / `expires_at`): its turn and the facts it gave leave
        the store and the index, its text leaves its session, and the sweep is written to the context's trail
        (`usage_report` counts it). Another fact's validity window is not touched."""
        ctx, turn_id = payload["context_id"], payload["turn"]
        facts = list(payload.get("attributes") or [])
        session = self.records.get(ctx, "session", payload.get("session") or "")
        if session is not None and session.data.get("last_turn") == turn_id:
            cleared = dict(session.data, last_text="")
            self.records.transact(
                [Write(ctx, "session", session.id, cleared, "expiry", session.version)], self.clock.now()
            )
        gone = self.records.purge_many(ctx, "turn", [turn_id]) + self.records.purge_many(ctx, "attribute", facts)
        self.index.delete(ctx, [turn_id, *facts])
        if self.audit is not None:
            self.audit.record(ctx, key_id="system", principal="system", tool="memory_expire", transport="job",
                              objects_=[turn_id, *facts], outcome="ok", cost={"expired": float(gone)})  # fmt: skip
