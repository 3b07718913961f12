"""One knowledge graph, fed by every text that enters: conversation messages, documents (every ingest path),
and records whose schema asks for search. (Memory turns feed it too, through their own first-person rules:
`engram.families.memory.service` → `entities.mention`.)

A write commits a `graph.extract` job with itself; the job, run after the commit and never on the write's
path, reads the source as it is now (`engram.families.entities.graph_rules`) and brings the graph to it:

- every name the source gives is a **mention**: a `gmention` record `{entity}|{source}`, written once, and the
  entity's count under the source's scope set (`entity.gm[scope set]`: the count, a sentence that mentions
  it, its other spellings, the sources), changed in the same transaction — so running a job twice, or after a
  crash half way, counts nothing twice;
- every relation it states is **evidence** for an edge: a `grelev` record `{relation}|{source}` and the
  edge's count under the source's scope set (`relation.ev`), the same way;
- what the source no longer says (an update) or nothing at all (a delete) is taken away the same way; an
  entity nobody mentions any more goes dormant (out of lists and search) unless a caller edited it;
- a `gsource` record per source keeps what it said, for the next job to compare with.

Who sees what follows the one rule (`engram.kernel.scopes.can_see`): an entity and an edge carry the scope sets of
their sources, and every count, sentence, spelling and source a caller is shown comes from sets it may see.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from engram.families.entities import GRAPH_JOB as JOB
from engram.families.entities import graph_rules
from engram.families.entities.mentions import alias_entry, alias_type, first_fed, fold, index_doc, scope_set
from engram.kernel.clock import iso
from engram.kernel.errors import Conflict
from engram.kernel.ports import Item, Write
from engram.kernel.queue import Queue
from engram.kernel.retry import on_conflict
from engram.kernel.services import BaseService

log = logging.getLogger("engram.graph")
MENTION, EVIDENCE, SOURCE = "gmention", "grelev", "gsource"
MAX_SOURCES = 10  # sources kept per entity (or edge) and scope set: what a caller is shown
MAX_TEXT = 200_000  # characters of one source read for names (a long document: its first 200,000)
ORG_SUFFIXES = ("corporation", "corp", "inc", "incorporated", "company", "co", "ltd", "limited", "llc", "plc", "group")


def source_id(kind: str, id_: str) -> str:
    """A source's name in the graph: `document:doc_1`, `message:<thread>|0000000003`, `record:rec_1`."""
    return f"{kind}:{id_}"


def _guard(item: Item) -> Write:
    return Write(item.context_id, item.kind, item.id, {}, "graph", item.version, check=True)


def extraction_job(queue: Queue, ctx: str, kind: str, id_: str, now: datetime) -> Write:
    """The job a write of a source commits with itself: the graph follows the source after the commit."""
    return queue.job(JOB, {"context_id": ctx, "source": source_id(kind, id_)}, now)


class SourceChanged(Exception):
    """The source was changed or erased after the job read it: what the job would write is read again."""


READS = 5  # reads of a source that keeps changing under the job before it gives up (and is tried later)
Found = tuple[str, list[str], dict[str, str], Write]


class GraphService(BaseService):
    # -- reading a source as it is now ------------------------------------------------------------------------

    def _source(self, ctx: str, source: str) -> Found | None:
        """(text, scopes, how a caller names it, the guard) of the source, or None when it is gone (deleted,
        or not searchable any more). The guard is a check of the item read at the version read: every write
        the job makes from this text holds it, so a write can never land after the source was erased or
        replaced (it would bring back words an erasure took)."""
        kind, _, id_ = source.partition(":")
        if kind == "document":
            from engram.families.knowledge.base import chunk_key

            doc = self.records.get(ctx, "document", id_)
            if doc is None or doc.data.get("status") == "deleted":
                return None
            keys = [chunk_key(doc.data, p) for p in range(int(doc.data.get("chunks") or 0))]
            chunks = self.records.get_many(ctx, "chunk", keys)
            text = "\n\n".join(str(chunks[k].data.get("text") or "") for k in keys if k in chunks)
            return text[:MAX_TEXT], list(doc.data.get("scopes") or []), {"kind": "document", "id": id_}, _guard(doc)
        if kind == "message":
            msg = self.records.get(ctx, "message", id_)
            if msg is None:
                return None
            shown = {"kind": "message", "id": str(msg.data.get("message_id")), "thread_id": str(msg.data["thread_id"])}
            return str(msg.data.get("content") or ""), list(msg.data.get("scopes") or []), shown, _guard(msg)
        if kind == "record":
            rec = self.records.get(ctx, "record", id_)
            if rec is None or rec.data.get("status") == "deleted" or rec.data.get("index_mode") == "none":
                return None
            text = ". ".join(_strings(rec.data.get("payload") or {}))[:MAX_TEXT]
            return text, list(rec.data.get("scopes") or []), {"kind": "record", "id": id_}, _guard(rec)
        raise ValueError(f"unknown graph source {source!r}")

    # -- the job ----------------------------------------------------------------------------------------------

    def extract_job(self, payload: dict[str, Any]) -> None:
        self.extract(payload["context_id"], payload["source"])

    def extract(self, ctx: str, source: str, gone: bool = False) -> dict[str, int]:
        """Bring the graph to what `source` says now (nothing, if it is gone, or `gone`: an erasure's). Idempotent.
        A source changed or erased while the job writes is read again (what was written from it before the
        change is undone by the next reading, as for any edit of it)."""
        for _ in range(READS):
            try:
                return self._extract(ctx, source, gone)
            except SourceChanged:
                continue
        raise Conflict(f"graph source {source!r} kept changing while it was read: the job is tried again")

    def _extract(self, ctx: str, source: str, gone: bool) -> dict[str, int]:
        found = None if gone else self._source(ctx, source)
        text, scopes, shown, guard = found if found is not None else ("", [], {}, None)
        shown = dict(shown, source=source)
        mentions: dict[str, tuple[str, str, str]] = {}  # entity id -> (type, spelling, sentence)
        edges: dict[str, tuple[str, str, str, str]] = {}  # relation id -> (from id, type, to id, sentence)
        spelled: dict[str, str] = {}  # entity id -> the name a relation shows
        typed: dict[str, str] = {}  # entity id -> its type
        if found is not None and scopes:
            if self.generator is not None:
                gen = self.generator
                names, facts = graph_rules.read_with_llm(lambda sys, p: gen.generate(sys, p, max_tokens=800), text)
            else:
                names, facts = graph_rules.read(text)
            ids: dict[tuple[str, str], str] = {}
            # a surname alone is the person the text named in full ("Jane Smith ... Smith said")
            full = {n.text.split()[-1]: n.text for n, _ in names if n.type == graph_rules.PERSON and " " in n.text}
            for name, sentence in names:
                if name.type == graph_rules.PERSON and " " not in name.text and name.text in full:
                    ids[(name.type, name.text)] = ids.get((name.type, full[name.text])) or self._resolve(
                        ctx, name.type, full[name.text]
                    )
                    typed.setdefault(ids[(name.type, name.text)], name.type)
                    continue
                spelling = canonical(name.type, name.text)
                eid = ids.setdefault((name.type, name.text), self._resolve(ctx, name.type, spelling))
                mentions.setdefault(eid, (name.type, spelling, sentence))
                spelled.setdefault(eid, spelling)
                typed.setdefault(eid, name.type)
            for fact in facts:
                head = ids.get((fact.head.type, fact.head.text))
                tail = ids.get((fact.tail.type, fact.tail.text))
                if head and tail and head != tail:
                    edges.setdefault(f"grel:{head}|{fact.relation}|{tail}", (head, fact.relation, tail, fact.sentence))
        before = self.records.get(ctx, SOURCE, source)
        old = before.data if before is not None else {"mentions": [], "relations": [], "scopes": scopes}
        moved = sorted(old.get("scopes") or []) != sorted(scopes)  # another scope set: everything again
        touched: set[str] = set()
        for rid in old["relations"]:
            if moved or rid not in edges:
                self._unrelate(ctx, rid, source, old.get("scopes") or [])
        for eid in old["mentions"]:
            if moved or eid not in mentions:
                touched.add(self._unmention(ctx, eid, source, old.get("scopes") or []))
        for eid, (etype, spelling, sentence) in mentions.items():
            touched.add(
                self._mention(
                    ctx, eid, etype=etype, spelling=spelling, sentence=sentence, shown=shown, scopes=scopes, guard=guard
                )
            )
        for rid, (head, rtype, tail, sentence) in edges.items():
            ends = ([typed[head], self._name(ctx, head, spelled)], [typed[tail], self._name(ctx, tail, spelled)])
            self._relate(
                ctx,
                rid,
                ends=ends,
                ids=(head, tail),
                rtype=rtype,
                shown=shown,
                scopes=scopes,
                sentence=sentence,
                guard=guard,
            )
        now = self.clock.now()
        if found is None:
            if before is not None:
                self.records.purge(ctx, SOURCE, source)
        else:
            data = {"mentions": sorted(mentions), "relations": sorted(edges), "scopes": scopes, "at": iso(now)}
            self._put(ctx, SOURCE, source, data, guard)
        self._reindex(ctx, touched)
        return {"mentions": len(mentions), "relations": len(edges)}

    def _put(self, ctx: str, kind: str, id_: str, data: dict[str, Any], guard: Write | None = None) -> None:
        def attempt() -> None:
            current = self.records.get(ctx, kind, id_)
            at = current.version if current is not None else 0
            self._transact(ctx, [Write(ctx, kind, id_, data, "graph", at)], self.clock.now(), guard)

        on_conflict(attempt)

    def _transact(self, ctx: str, writes: list[Write], now: datetime, guard: Write | None) -> None:
        """`writes`, holding the source's guard: a conflict because the source moved is SourceChanged."""
        try:
            self.records.transact([*writes, guard] if guard is not None else writes, now)
        except Conflict:
            if guard is not None:
                current = self.records.get(ctx, guard.kind, guard.id)
                if current is None or current.version != guard.expected_version:
                    raise SourceChanged(guard.id) from None
            raise

    # -- names: which entity a spelling is ---------------------------------------------------------------------

    def _resolve(self, ctx: str, etype: str, name: str) -> str:
        """The entity a name means: one of its type already known by this spelling or alias (case and accents
        aside; for an organisation also without "Inc.", "Corp." ...), else a new one."""
        for spelling in _spellings(etype, name):
            for entry in self.records.query(ctx, "ealias", prefix=fold(spelling) + "|", limit=20).items:
                if alias_type(entry.data) == etype:
                    return self._live(ctx, str(entry.data["entity"]))
        return self.ids.entity(ctx, etype, name)

    def _live(self, ctx: str, eid: str) -> str:
        """`eid`, or the entity it was merged into."""
        for _ in range(10):
            item = self.records.get(ctx, "entity", eid)
            if item is None or not item.data.get("merged_into"):
                return eid
            eid = str(item.data["merged_into"])
        return eid

    # -- mentions ----------------------------------------------------------------------------------------------

    def _mention(
        self,
        ctx: str,
        eid: str,
        *,
        etype: str,
        spelling: str,
        sentence: str,
        shown: dict[str, str],
        scopes: list[str],
        guard: Write | None = None,
    ) -> str:
        key, source = scope_set(scopes), shown["source"]

        def attempt() -> str:
            target = self._live(ctx, eid)
            if self.records.get(ctx, MENTION, f"{eid}|{source}") is not None:  # counted already: a job run again,
                self._resay(ctx, target, key, source, _short(sentence), guard)  # or its source was edited
                return target
            now = self.clock.now()
            item = self.records.get(ctx, "entity", target)
            writes = [Write(ctx, MENTION, f"{eid}|{source}", {"entity": target, "source": source, "scopes": scopes},
                            "graph", 0)]  # fmt: skip
            if item is None:
                data: dict[str, Any] = {"type": etype, "name": spelling, "aliases": [], "description": "",
                                        "metadata": {}, "mentions": {}, "created_at": iso(now)}  # fmt: skip
                writes += [Write(ctx, "ealias", f"{fold(s)}|{target}", alias_entry(target, etype, s), "graph", None)
                           for s in _spellings(etype, spelling)]  # fmt: skip
            else:
                data = dict(item.data)
            gm = {k: dict(v) for k, v in (data.get("gm") or {}).items()}
            entry = gm.setdefault(key, {"n": 0, "sentence": "", "from": "", "sources": [], "aliases": {}})
            entry["n"] += 1
            if not entry["sentence"]:
                entry["sentence"], entry["from"] = _short(sentence), source
            entry["sources"] = [*[s for s in entry["sources"] if s["source"] != source], shown][-MAX_SOURCES:]
            if fold(spelling) != fold(data["name"]):
                aliases = dict(entry["aliases"])
                aliases[spelling] = aliases.get(spelling, 0) + 1
                entry["aliases"] = aliases
                writes.append(Write(ctx, "ealias", f"{fold(spelling)}|{target}",
                                    alias_entry(target, str(data["type"]), spelling), "graph", None))  # fmt: skip
            data["gm"] = gm
            data["first"] = first_fed(data, key, now)
            data["scopes"] = _scopes(data)
            data["dormant"] = False
            writes.insert(1, Write(ctx, "entity", target, data, "graph", item.version if item else 0))
            self._transact(ctx, writes, now, guard)
            return target

        return on_conflict(attempt)

    def _resay(self, ctx: str, eid: str, key: str, source: str, sentence: str, guard: Write | None) -> None:
        """The sentence an entity shows from `source`, as the source says it now (an edited document's)."""
        item = self.records.get(ctx, "entity", eid)
        entry = ((item.data.get("gm") or {}).get(key) or {}) if item is not None else {}
        if item is None or entry.get("from") != source or entry.get("sentence") == sentence:
            return
        gm = {k: dict(v) for k, v in (item.data.get("gm") or {}).items()}
        gm[key]["sentence"] = sentence
        self._transact(ctx, [Write(ctx, "entity", eid, dict(item.data, gm=gm), "graph", item.version)],
                       self.clock.now(), guard)  # fmt: skip

    def _unmention(self, ctx: str, eid: str, source: str, scopes: list[str]) -> str:
        key = scope_set(scopes)

        def attempt() -> str:
            target = self._live(ctx, eid)
            mark = self.records.get(ctx, MENTION, f"{eid}|{source}")
            if mark is None:
                return target  # taken away already
            item = self.records.get(ctx, "entity", target)
            writes = [Write(ctx, MENTION, mark.id, {}, "graph", mark.version, remove=True)]
            if item is not None:
                data = dict(item.data)
                gm = {k: dict(v) for k, v in (data.get("gm") or {}).items()}
                entry = gm.get(key)
                if entry is not None:
                    entry["n"] -= 1
                    entry["sources"] = [s for s in entry["sources"] if s["source"] != source]
                    if entry["from"] == source:
                        entry["sentence"], entry["from"] = "", ""
                    if entry["n"] <= 0:
                        del gm[key]
                data["gm"] = gm
                left = _scopes(data)
                # nobody mentions it any more: dormant (out of every list and search), keeping the scopes it
                # had, as every record of a scoped kind does
                data["dormant"] = not left and not data.get("edited")
                data["scopes"] = left or data.get("scopes") or scopes
                writes.append(Write(ctx, "entity", target, data, "graph", item.version))
            self.records.transact(writes, self.clock.now())
            return target

        return on_conflict(attempt)

    def _reindex(self, ctx: str, ids: set[str]) -> None:
        """The touched entities in the search index as they are now: out of it when dormant."""
        found = self.records.get_many(ctx, "entity", sorted(ids))
        gone = [eid for eid, item in found.items() if item.data.get("dormant") or item.data.get("merged_into")]
        live = [item for item in found.values() if item.id not in gone]
        if gone:
            self.index.delete(ctx, gone)
        if live:
            docs = [index_doc(ctx, item.id, item.data) for item in live]
            vectors = self.embedder.embed([d.text for d in docs]) if self.embedder is not None else [None] * len(docs)
            self.index.upsert([d.with_vector(v) for d, v in zip(docs, vectors, strict=True)])

    # -- relations ---------------------------------------------------------------------------------------------

    def _name(self, ctx: str, eid: str, spelled: dict[str, str]) -> str:
        item = self.records.get(ctx, "entity", self._live(ctx, eid))
        return str(item.data["name"]) if item is not None else spelled.get(eid, "")

    def _relate(
        self,
        ctx: str,
        rid: str,
        *,
        ends: tuple[list[str], list[str]],
        ids: tuple[str, str],
        rtype: str,
        shown: dict[str, str],
        scopes: list[str],
        sentence: str,
        guard: Write | None = None,
    ) -> None:
        key, source = scope_set(scopes), shown["source"]

        def attempt() -> None:
            if self.records.get(ctx, EVIDENCE, f"{rid}|{source}") is not None:
                return
            now = self.clock.now()
            item = self.records.get(ctx, "relation", rid)
            data: dict[str, Any] = dict(item.data) if item is not None else {
                "from": ends[0], "type": rtype, "to": ends[1], "ends": list(ids), "since": iso(now)}  # fmt: skip
            ev = {k: dict(v) for k, v in (data.get("ev") or {}).items()}
            entry = ev.setdefault(key, {"n": 0, "sources": [], "sentence": _short(sentence)})
            entry["n"] += 1
            entry["sources"] = [*[s for s in entry["sources"] if s["source"] != source], shown][-MAX_SOURCES:]
            data["ev"] = ev
            data["scopes"] = sorted({p for k in ev for p in k.split("|") if p})
            data["retracted"] = False
            self._transact(
                ctx,
                [Write(ctx, EVIDENCE, f"{rid}|{source}", {"relation": rid, "source": source}, "graph", 0),
                 Write(ctx, "relation", rid, data, "graph", item.version if item else 0)],
                now,
                guard,
            )  # fmt: skip

        on_conflict(attempt)

    def _unrelate(self, ctx: str, rid: str, source: str, scopes: list[str]) -> None:
        key = scope_set(scopes)

        def attempt() -> None:
            mark = self.records.get(ctx, EVIDENCE, f"{rid}|{source}")
            if mark is None:
                return
            item = self.records.get(ctx, "relation", rid)
            writes = [Write(ctx, EVIDENCE, mark.id, {}, "graph", mark.version, remove=True)]
            if item is not None:
                data = dict(item.data)
                ev = {k: dict(v) for k, v in (data.get("ev") or {}).items()}
                if key in ev:
                    ev[key]["n"] -= 1
                    ev[key]["sources"] = [s for s in ev[key]["sources"] if s["source"] != source]
                    if ev[key]["n"] <= 0:
                        del ev[key]
                data["ev"] = ev
                left = sorted({p for k in ev for p in k.split("|") if p})
                data["retracted"] = not left  # no source states it any more: no reader shows it
                data["scopes"] = left or data.get("scopes") or scopes
                writes.append(Write(ctx, "relation", rid, data, "graph", item.version))
            self.records.transact(writes, self.clock.now())

        on_conflict(attempt)


def _scopes(data: dict[str, Any]) -> list[str]:
    """An entity's scopes: those of every scope set that mentions it (memory's and the sources')."""
    keys = [*(data.get("mentions") or {}), *(data.get("gm") or {}), *(data.get("edits") or {})]
    return sorted({p for k in keys for p in k.split("|") if p})


def canonical(etype: str, name: str) -> str:
    """A name as the graph keeps it: an organisation's abbreviated suffix without its period ("Acme Corp.")."""
    if etype == graph_rules.ORG and name.endswith(".") and name.rsplit(" ", 1)[-1].lower().rstrip(".") in ORG_SUFFIXES:
        return name[:-1]
    return name


def _spellings(etype: str, name: str) -> list[str]:
    out = [name]
    if etype == graph_rules.ORG:
        words = name.replace(",", " ").split()
        while len(words) > 1 and words[-1].lower().rstrip(".") in ORG_SUFFIXES:
            words = words[:-1]
            out.append(" ".join(words))
    return out


def _short(sentence: str, limit: int = 240) -> str:
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rsplit(" ", 1)[0] + "…"


def _strings(value: Any) -> list[str]:
    """The string values of a payload that read as text (several words), in order."""
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) and " " in value.strip() else []


__all__ = ["JOB", "Conflict", "GraphService", "Item", "extraction_job", "source_id"]
