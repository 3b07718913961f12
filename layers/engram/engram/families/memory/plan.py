"""The memory family's writes: a plan of one transaction's records (read-your-writes, expected versions), and
what the search index holds for a turn, an attribute or an entity."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from engram.families.entities import mentions as entities
from engram.families.memory import INDEX_JOB
from engram.families.memory.base import _slug
from engram.kernel.clock import iso, parse_time
from engram.kernel.opaque import OpaqueIds
from engram.kernel.ports import (
    IndexDoc,
    Item,
    RecordStore,
    SearchIndex,
    Vector,
    Write,
)
from engram.kernel.queue import Queue
from engram.kernel.scopes import tags_key
from engram.kernel.unit_of_work import UnitOfWork
from engram.search.terms import approx_tokens

# attributes whose value names an entity, and the edge they make: (edge type, the entity's type)
ATTRIBUTE_EDGES = {"employer": ("works_at", "Organization"), "location": ("lives_in", "Location")}


class Plan:
    """Writes collected for one transaction, with read-your-writes and expected versions."""

    def __init__(self, records: RecordStore, ctx: str, actor: str, now: datetime, ids: OpaqueIds) -> None:
        self.records, self.ctx, self.actor, self.now, self.ids = records, ctx, actor, now, ids
        self._seen: dict[tuple[str, str], tuple[int, dict[str, Any] | None]] = {}
        self._writes: dict[tuple[str, str], dict[str, Any]] = {}
        self._docs: list[tuple[IndexDoc, str]] = []
        self._closings: list[tuple[str, datetime]] = []
        self._expiry: dict[tuple[str, str], datetime] = {}  # records written with a time to live
        self._jobs: list[Write] = []  # committed with the records (the sweep of what expires)

    def entity_id(self, etype: str, name: str) -> str:
        return self.ids.entity(self.ctx, etype, name)

    def relation_id(self, subject: str, rtype: str, target: str) -> str:
        """The id of memory's edge from its subject to a value: the one kept under its old id (which named
        them both), if only that is there; else the opaque one."""
        new = self.ids.relation(self.ctx, "memory", _slug(subject), rtype, _slug(target))
        old = f"rel:{_slug(subject)}:{rtype}:{_slug(target)}"
        return old if self.get("relation", new) is None and self.get("relation", old) is not None else new

    def get(self, kind: str, id_: str) -> dict[str, Any] | None:
        key = (kind, id_)
        if key in self._writes:
            return self._writes[key]
        if key not in self._seen:
            item = self.records.get(self.ctx, kind, id_)
            self._seen[key] = (item.version, item.data) if item else (0, None)
        return self._seen[key][1]

    def put(self, kind: str, id_: str, data: dict[str, Any], expires_at: datetime | None = None) -> None:
        self.get(kind, id_)  # remember the version we build on
        self._writes[(kind, id_)] = data
        if expires_at is not None:
            self._expiry[(kind, id_)] = expires_at

    def later(self, job: Write) -> None:
        """A job committed with the records and started after them."""
        self._jobs.append(job)

    def index(self, doc: IndexDoc, embed_text: str) -> None:
        """Index `doc` (its vector from `embed_text`) once the records are committed."""
        self._docs.append((doc, embed_text))

    def texts(self) -> list[str]:
        """What the documents to index are embedded from, in order."""
        return [t for _, t in self._docs]

    def close(self, id_: str, until: datetime) -> None:
        """Close an indexed document's validity once the records are committed."""
        self._closings.append((id_, until))

    def finish(self, index: SearchIndex, embed: Callable[[Sequence[str]], list[Vector | None]], queue: Queue) -> None:
        """Embed first (the slow part, before anything is written), then commit the records in one
        transaction, then index (DESIGN §9: nothing visible before the commit; a failed commit leaves
        nothing) — `engram.kernel.unit_of_work`: the commit also holds a safety net that indexes the same records
        again from the store if this process dies (or the index fails) before it has."""
        vectors = embed(self.texts())
        touched = [[d.kind, d.id] for d, _ in self._docs] + [["attribute", id_] for id_, _ in self._closings]
        writes = self._writes_to_commit()
        if not writes:
            return

        def reindex(_: list[Item]) -> None:
            index.upsert(
                [d.with_vector(v) for (d, _), v in zip(self._docs, vectors, strict=True)],
                [(self.ctx, id_, until) for id_, until in self._closings],
            )

        net = (INDEX_JOB, {"context_id": self.ctx, "items": touched}) if touched else None
        UnitOfWork(self.records, queue).commit(
            writes, self.now, reindex=reindex if touched else None, net=net, jobs=self._jobs
        )

    def written(self, kind: str) -> list[str]:
        return [i for (k, i) in self._writes if k == kind]

    @property
    def size(self) -> int:
        """How many records the commit writes (the index job included)."""
        return len(self._writes) + len(self._jobs) + (1 if self._docs or self._closings else 0)

    def _writes_to_commit(self) -> list[Write]:
        return [
            Write(
                self.ctx,
                kind,
                id_,
                data,
                self.actor,
                expected_version=self._seen[(kind, id_)][0],
                expires_at=self._expiry.get((kind, id_)),
            )
            for (kind, id_), data in self._writes.items()
        ]


def index_doc_of(item: Item) -> IndexDoc:
    """What the index holds for a turn, an attribute or an entity record (as `_plan` indexes them)."""
    return index_doc(item.context_id, item.kind, item.id, item.data)


def index_doc(context_id: str, kind: str, id_: str, d: dict[str, Any]) -> IndexDoc:
    """What the index holds for the record `d` of a turn, an attribute or an entity: the one definition the
    write path, a reindex and a listing share."""
    if kind == "entity":
        return entities.index_doc(context_id, id_, d)
    if kind == "turn":
        meta = dict(d.get("metadata") or {}) | {
            "session_id": d["session_id"],
            "role": d["role"],
            "said_at": d["said_at"],
        }
        if d.get("expires_at"):
            meta["expires_at"] = d["expires_at"]
        text = turn_text(d["content"], meta.get("speaker"))
        until = parse_time(d.get("expires_at"))
        return IndexDoc(context_id, "turn", id_, text, None, d["scopes"], parse_time(d["said_at"]), until, meta)
    meta = {"key": d["key"], "category": d["category"], "said_at": d["valid_from"], "source_turn": d["source_turn"]}
    if d.get("session_id"):  # the session the fact was said in (what a recall that names its speaker narrows by)
        meta["session_id"] = d["session_id"]
    if d.get("expires_at"):
        meta["expires_at"] = d["expires_at"]
    text = attribute_text(d["subject"], d["key"], d["value"])
    return IndexDoc(
        context_id,
        "attribute",
        id_,
        text,
        None,
        d["scopes"],
        parse_time(d["valid_from"]),
        min(
            (t for t in (parse_time(d["valid_until"]), parse_time(d.get("expires_at"))) if t is not None), default=None
        ),
        meta,
    )


def session_key(session_id: str, tags: Sequence[str]) -> str:
    """A session belongs to the scopes it was created under: the same `session_id` said under another
    scope set is another session (it never joins, counts in or reads from the first)."""
    return f"{session_id}|{tags_key(tags)}"


def turn_text(content: str, speaker: object) -> str:
    """What is indexed and shown for a turn: the speaker's name leads when known."""
    return f"{speaker}: {content}" if isinstance(speaker, str) and speaker else content


def attribute_text(subject: str, key: str, value: str) -> str:
    return f"{subject} {key.replace('_', ' ')}: {value}"


def touch_session(
    plan: Plan, session_id: str, *, tags: list[str], said: datetime, content: str, text: str, turn_id: str = ""
) -> None:
    current = plan.get("session", session_key(session_id, tags))
    data = (
        dict(current)
        if current
        else {
            "session_id": session_id,
            "first_at": iso(said),
            "last_at": iso(said),
            "turns": 0,
            "tokens": 0,
            "scopes": [],
        }
    )
    first, last = parse_time(data["first_at"]), parse_time(data["last_at"])
    assert first is not None and last is not None
    data["first_at"], data["last_at"] = iso(min(first, said)), iso(max(last, said))
    data["turns"] += 1
    data["tokens"] += approx_tokens(content)
    data["scopes"] = sorted(set(data["scopes"]) | set(tags))
    data["last_text"] = text[-400:]
    data["last_turn"] = turn_id  # whose words last_text holds (an expiring turn's are taken out with it)
    data["seq"] = data["turns"]  # the turn's place in its session: a definite order under concurrency
    plan.put("session", session_key(session_id, tags), data)
