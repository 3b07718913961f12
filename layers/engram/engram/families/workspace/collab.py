"""Agents working together on the workspace (Agrama's collaboration and decision tools).

Sessions (`create_session`, `sync_document`): a document's edits are Yjs updates made with pycrdt (a real
CRDT, not a home-made merge), kept as an append-only log: one `wop` record per operation, under an id of
its own (appends never conflict with each other), with its agent, the agent's sequence number and the
vector clock it was made at. An agent's positional operation (insert at 150, delete 10 at 40) is applied
to the document as that agent saw it — the base text and the operations its vector clock covers — and
the Yjs update this makes is what the log keeps, so whatever order operations arrive in, every replica
that applies the log converges to the same text. Every SNAPSHOT_EVERY operations of a document, a
snapshot (`wsnap`: the merged state and the clock it covers) saves replaying the whole log. After a sync,
the converged text is written as the file's next version, every agent that contributed in its provenance.

Decisions (`record_decision`): one `decision` record each, versioned and scoped, in the search index.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram.families.workspace import DECISION_JOB
from engram.families.workspace.files import NewFile, WorkspaceService
from engram.families.workspace.shapes import clean_path
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, new_id
from engram.kernel.errors import InvalidInput, NotFound, embedding_errors
from engram.kernel.ports import IndexDoc, Item, Write, scan
from engram.kernel.retry import on_conflict
from engram.kernel.scopes import can_see
from engram.kernel.services import BaseService, Kernel
from engram.kernel.unit_of_work import UnitOfWork

SESSION, OP, CLOCK, SNAP, DECISION = "wsession", "wop", "wclock", "wsnap", "decision"
SNAPSHOT_EVERY = 50
BASE = "_base"
MAX_OPS = 500
MAX_AGENT = 128


@dataclass(frozen=True)
class Edit:
    type: str  # insert / delete
    position: int
    content: str = ""
    length: int = 0
    vector_clock: dict[str, int] | None = None


def _client_id(agent: str, seq: int) -> int:
    """A Yjs client id of this operation alone (two operations never share one)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{agent}#{seq}".encode()).digest()[:4], "big") | 1


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class CollabService(BaseService):
    def __init__(self, kernel: Kernel, workspace: WorkspaceService) -> None:
        super().__init__(kernel)
        self.workspace = workspace

    # -- sessions ---------------------------------------------------------------------------

    def _visible(self, caller: Caller, kind: str, id_: str, what: str) -> Item:
        item = self.records.get(caller.context_id, kind, id_)
        if item is None or not can_see(item.data.get("scopes"), self.identity.read_lens(caller, None)):
            raise NotFound(f"no {what} {id_!r}")
        return item

    def create_session(
        self, caller: Caller, name: str, participants: list[str], paths: list[str], session_type: str, real_time: bool
    ) -> dict[str, Any]:
        import pycrdt

        clean = [clean_path(p) for p in paths]
        prefix, scopes = self.workspace.space(caller)
        now = self.clock.now()
        session_id = "sess_" + new_id("s").partition(":")[2]
        data = {
            "session_id": session_id,
            "name": name,
            "participants": participants,
            "document_paths": clean,
            "session_type": session_type,
            "real_time": real_time,
            "status": "active",
            "created_at": iso(now),
            "scopes": scopes,
            "workspace": prefix,
        }
        writes = [Write(caller.context_id, SESSION, session_id, data, caller.actor, 0)]
        for path in clean:  # each document starts from the file as it is (or empty)
            item = self.workspace._file(caller, path)
            doc: Any = pycrdt.Doc(client_id=_client_id(BASE, 0))
            text = doc.get("text", type=pycrdt.Text)
            if item is not None:
                text.insert(0, self.workspace.content(item))
            op = {"agent": BASE, "seq": 0, "update": _b64(doc.get_update()), "clock": {}, "document": path}
            writes.append(Write(caller.context_id, OP, f"{session_id}|{path}|0", op, caller.actor, 0))
        self.records.transact(writes, now)
        return {
            "session_id": session_id,
            "session_name": name,
            "participants": participants,
            "document_paths": clean,
            "session_type": session_type,
            "status": "active",
            "created_at": iso(now),
        }

    def sessions(self, caller: Caller, path: str | None = None) -> list[dict[str, Any]]:
        prefix, _ = self.workspace.space(caller)
        lens = self.identity.read_lens(caller, None)
        out = []
        for item in scan(self.records, caller.context_id, SESSION):
            d = item.data
            mine = d.get("workspace") == prefix and can_see(d["scopes"], lens) and d["status"] == "active"
            if mine and (path is None or path in d["document_paths"]):
                out.append(
                    {
                        k: d[k]
                        for k in ("session_id", "name", "participants", "document_paths", "session_type", "created_at")
                    }
                )
        return out

    def _ops(self, ctx: str, session_id: str, path: str, after: int = -1, upto: int | None = None) -> list[Item]:
        """The document's operations with a sequence number above `after` and up to `upto`, in id (sequence)
        order: one key range (an id is the sequence number, zero-padded, then the agent; the base's is 0)."""
        prefix = f"{session_id}|{path}|"
        start = f"{prefix}{after + 1:08d}" if after >= 0 else None
        end = f"{prefix}{upto:08d}\U0010ffff" if upto is not None else None
        out: list[Item] = []
        cursor: str | None = None
        while True:
            page = self.records.query(ctx, OP, prefix=prefix, start=start, end=end, cursor=cursor, limit=1000)
            out += page.items
            if page.cursor is None:
                return out
            cursor = page.cursor

    def _clock(self, ctx: str, session_id: str, path: str) -> dict[str, int]:
        """Each agent's last sequence number on the document: its counter's version (bumped in the transaction
        that appends the agent's operation), so no operation needs reading."""
        return {i.data["agent"]: i.version for i in scan(self.records, ctx, CLOCK, prefix=f"{session_id}|{path}|")}

    def _state(self, ctx: str, session_id: str, path: str, clock: dict[str, int] | None, client: int = 0) -> Any:
        """The document as of `clock` (None: everything): the snapshot when the clock covers it, then the
        operations the clock covers; edits made on it are Yjs client `client`'s."""
        import pycrdt

        doc: Any = pycrdt.Doc(client_id=client) if client else pycrdt.Doc()
        snap = self.records.get(ctx, SNAP, f"{session_id}|{path}")
        covered: dict[str, int] = {}
        after, upto = -1, None if clock is None else max([0, *clock.values()])  # nothing later is covered
        if snap is not None and (clock is None or all(clock.get(a, 0) >= s for a, s in snap.data["clock"].items())):
            doc.apply_update(base64.b64decode(snap.data["update"]))
            covered = snap.data["clock"]
            # what every agent's operations up to a sequence number are covered by the snapshot (the base, 0,
            # too): only those above it need reading
            after = min((covered.get(a, 0) for a in self._clock(ctx, session_id, path)), default=-1)
        for op in self._ops(ctx, session_id, path, after, upto):
            agent, seq = op.data["agent"], op.data["seq"]
            if agent != BASE and seq <= covered.get(agent, 0):
                continue
            if agent == BASE or clock is None or seq <= clock.get(agent, 0):
                doc.apply_update(base64.b64decode(op.data["update"]))
        return doc

    def sync(
        self,
        caller: Caller,
        path: str,
        edits: Sequence[Edit],
        clock: dict[str, int] | None,
        agent: str,
        session_id: str | None,
    ) -> dict[str, Any]:
        import pycrdt

        path = clean_path(path)
        if not agent or len(agent) > MAX_AGENT or agent == BASE:
            raise InvalidInput(f"agent_id must be 1 to {MAX_AGENT} characters (not {BASE})")
        if len(edits) > MAX_OPS:
            raise InvalidInput(f"at most {MAX_OPS} operations a call")
        ctx = caller.context_id
        if session_id is None:  # the document's open session, or a session of its own
            open_ = self.sessions(caller, path)
            session_id = open_[-1]["session_id"] if open_ else None
        if session_id is None:
            session_id = self.create_session(caller, f"sync {path}", [agent], [path], "editing", True)["session_id"]
        session = self._visible(caller, SESSION, session_id, "session")
        if path not in session.data["document_paths"]:
            raise InvalidInput(f"{path!r} is not a document of session {session_id!r}")
        applied = 0
        for edit in edits:
            seen = edit.vector_clock if edit.vector_clock is not None else clock

            def append(edit: Edit = edit, seen: dict[str, int] | None = seen) -> None:
                counter = self.records.get(ctx, CLOCK, f"{session_id}|{path}|{agent}")
                seq = (counter.version if counter else 0) + 1
                # the operation is applied as its agent saw the document; positions past its end clamp
                doc = self._state(ctx, session_id, path, seen, _client_id(agent, seq))
                before = doc.get_state()
                text = doc.get("text", type=pycrdt.Text)
                size = len(str(text))
                if edit.type == "insert":
                    text.insert(min(max(edit.position, 0), size), edit.content)
                else:
                    start = min(max(edit.position, 0), size)
                    del text[start : min(size, start + max(edit.length, 0))]
                op = {
                    "agent": agent,
                    "seq": seq,
                    "update": _b64(doc.get_update(before)),
                    "clock": seen or {},
                    "document": path,
                    "type": edit.type,
                }
                at = counter.version if counter else 0
                self.records.transact(
                    [
                        Write(ctx, CLOCK, f"{session_id}|{path}|{agent}", {"agent": agent}, caller.actor, at),
                        Write(ctx, OP, f"{session_id}|{path}|{seq:08d}.{agent}", op, caller.actor, 0),
                    ],
                    self.clock.now(),
                )

            on_conflict(append)
            applied += 1
        converged, state, version = on_conflict(lambda: self._converge(caller, session_id, path, agent))
        return {
            "success": True,
            "document_id": path,
            "session_id": session_id,
            "operations_applied": applied,
            "vector_clock": state,
            "content": converged,
            "version": version,
            "contributors": sorted(state),
        }

    def _converge(self, caller: Caller, session_id: str, path: str, agent: str) -> tuple[str, dict[str, int], int]:
        """Write the file from the whole merged log: (text, vector clock, the file's version). The file's version
        is read *before* the log, and the write expects it: a sync that appended an operation after this read
        either wrote after it (so this write conflicts, reads again and merges that operation too) or writes
        later itself. So the file always holds every acknowledged operation, never a writer's older view."""
        import pycrdt

        ctx = caller.context_id
        current = self.workspace._file(caller, path)
        at = current.version if current is not None else 0
        state = self._clock(ctx, session_id, path)  # read before the log: the merged text holds all of it
        merged = self._state(ctx, session_id, path, None)
        converged = str(merged.get("text", type=pycrdt.Text))
        self._snapshot(caller, session_id, path, merged, state, 1 + sum(state.values()))
        contributors = tuple(sorted(state))
        if current is not None and self.workspace.content(current) == converged:
            return converged, state, at  # already holds all of it
        written = self.workspace.write(
            caller,
            NewFile(
                path,
                converged,
                f"sync_document: session {session_id} ({', '.join(contributors)})",
                agent,
                validate_syntax=False,
                contributors=contributors,
                expected_version=at,
                embed_later=True,
            ),
        )
        return converged, state, written["item"].version

    def _snapshot(self, caller: Caller, session_id: str, path: str, doc: Any, state: dict[str, int], n: int) -> None:
        snap = self.records.get(caller.context_id, SNAP, f"{session_id}|{path}")
        done = sum(snap.data["clock"].values()) if snap else 0
        if sum(state.values()) - done < SNAPSHOT_EVERY:
            return
        data = {"update": _b64(doc.get_update()), "clock": state, "operations": n}
        try:
            write = Write(
                caller.context_id, SNAP, f"{session_id}|{path}", data, caller.actor, snap.version if snap else 0
            )
            self.records.transact([write], self.clock.now())
        except Exception:  # another sync took this snapshot: a later one will
            return

    # -- decisions --------------------------------------------------------------------------

    def record_decision(self, caller: Caller, fields: dict[str, Any]) -> dict[str, Any]:
        _, scopes = self.workspace.space(caller)
        now = self.clock.now()
        decision_id = "dec_" + new_id("d").partition(":")[2]
        data = dict(fields, id=decision_id, scopes=scopes, created_at=iso(now), agent=caller.actor)
        doc = decision_doc(caller.context_id, data)
        vector = None
        if self.embedder is not None:
            with embedding_errors():
                vector = self.embedder.embed([doc.text])[0]  # before the commit: a failing model writes nothing
        write = Write(caller.context_id, DECISION, decision_id, data, caller.actor, 0)
        net = (DECISION_JOB, {"context_id": caller.context_id, "ids": [decision_id]})
        [item] = UnitOfWork(self.records, self.queue).commit(
            [write], now, reindex=lambda _: self.index.upsert([doc.with_vector(vector)]), net=net
        )
        return {
            "success": True,
            "decision_id": decision_id,
            "timestamp": int(now.timestamp()),
            "version": item.version,
            "recorded_at": iso(now),
        }

    def decision_job(self, payload: dict[str, Any]) -> None:
        ctx = payload["context_id"]
        found = self.records.get_many(ctx, DECISION, list(payload["ids"]))
        docs = [decision_doc(ctx, item.data) for item in found.values()]
        if docs:
            vectors = self.embedder.embed([d.text for d in docs]) if self.embedder is not None else [None] * len(docs)
            self.index.upsert([d.with_vector(v) for d, v in zip(docs, vectors, strict=True)])

    def decision(self, caller: Caller, decision_id: str) -> Item:
        return self._visible(caller, DECISION, decision_id, "decision")


def decision_doc(ctx: str, data: dict[str, Any]) -> IndexDoc:
    """What the search index holds for a decision."""
    text = f"{data['decision']}\n{data['reasoning']}\n" + "\n".join(data.get("alternatives") or [])
    meta: dict[str, str | int | float | bool] = {
        "decision_id": data["id"],
        "impact": data.get("impact", ""),
        "created_at": data.get("created_at") or "",
    }
    return IndexDoc(ctx, DECISION, data["id"], text, None, data["scopes"], None, None, meta)
