"""Entities (Cortex's `entity_*` tools): the people, organisations and things memory extracts, with aliases,
a description, metadata, mention counts and relationships — one graph that `memory_store` writes (through
`mentions.mention`), Spectron's `knowledge_get kind=node` and these tools read.

Records (this family owns them):
- `entity` (`ent_` and a keyed hash of its type and name, `engram.kernel.opaque`: the id clients see, holding nothing
  of the name; `{Type}:{name lower-cased}` before, which still resolves): type, name, aliases, description,
  metadata, mention_count, created_at, scopes (those of everything that mentioned it). A merged entity stays as
  a pointer (`merged_into`), so its id and its name still lead to the one kept.
- `ealias` (`{folded name}|{entity id}`): one per name and alias, for lookups that ignore case and accents.
- `relation`: from / type / to between entities (each end as [type, name] to show, and `ends`: the two entity
  ids), with its own scopes.
Entities are indexed (kind `entity`: name, aliases, description) for `entity_search`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engram.families.entities import INDEX_JOB
from engram.families.entities.mentions import alias_entry, ends, first_fed, fold, index_doc, scope_set
from engram.kernel.caller import Caller
from engram.kernel.errors import Conflict, InvalidInput, NotFound, embedding_errors
from engram.kernel.opaque import is_legacy_entity
from engram.kernel.ports import Item, SearchQuery, Write, scan
from engram.kernel.retry import on_conflict
from engram.kernel.scopes import can_see
from engram.kernel.services import BaseService
from engram.kernel.unit_of_work import UnitOfWork
from engram.search.rules import query_vector

SORTS = ("name", "mention_count", "created_at")


def created_at(d: dict[str, Any], lens: list[list[str]]) -> str | None:
    """When the entity came to be, as a caller may know it: the first time a scope set it sees fed it (another
    scope's first mention is that scope's private time). An entity from before `first` was kept: its own
    `created_at` to a caller who sees every part of it, else none."""
    first = [str(t) for key, t in (d.get("first") or {}).items() if can_see(key.split("|"), lens)]
    if first:
        return min(first)
    keys = [k for name in ("mentions", "gm", "edits") for k in (d.get(name) or {})]
    return d.get("created_at") if all(can_see(k.split("|"), lens) for k in keys) else None


def _seen(d: dict[str, Any], field: str, lens: list[list[str]]) -> list[dict[str, Any]]:
    """The entries of a per-scope-set map (`gm`: the sources', `minfo`: memory's) a caller may see."""
    return [v for key, v in sorted((d.get(field) or {}).items()) if can_see(key.split("|"), lens)]


def mention_count(d: dict[str, Any], lens: list[list[str]]) -> int:
    """The mentions a caller may know of: those made under scope sets it can see (counting the others would
    tell it that someone it cannot see talks about this entity) — memory's turns and every other source."""
    memory = sum(int(n) for key, n in (d.get("mentions") or {}).items() if can_see(key.split("|"), lens))
    return memory + sum(int(v["n"]) for v in _seen(d, "gm", lens))


def public(item: Item, lens: list[list[str]]) -> dict[str, Any]:
    """An entity as a caller may see it: its aliases, description and sources drawn only from the scope sets
    it may see (an edited description or alias is the entity's own)."""
    d = item.data
    entries = [*_seen(d, "gm", lens), *_seen(d, "minfo", lens)]
    aliases = list(d.get("aliases", []))
    for entry in _seen(d, "gm", lens):
        aliases += sorted(entry.get("aliases") or {}, key=lambda a: -int(entry["aliases"][a]))
    sentence = next((str(e["sentence"]) for e in entries if e.get("sentence")), "")
    sources = [{k: v for k, v in s.items() if k != "source"} for e in entries for s in (e.get("sources") or [])][:20]
    return {
        "id": item.id,
        "name": d["name"],
        "type": d["type"],
        "aliases": _unique(aliases, d["name"]),
        "description": d.get("description") or sentence,
        "mention_count": mention_count(d, lens),
        "metadata": dict(d.get("metadata") or {}),
        "created_at": created_at(d, lens),
        "sources": sources,
    }


def current_edge(d: dict[str, Any]) -> bool:
    """A relation that holds now: not merged away, not ended (`until`: memory's superseded attribute)."""
    return not d.get("merged_into") and not d.get("until") and not d.get("retracted")


def evidence(d: dict[str, Any], lens: list[list[str]]) -> list[dict[str, Any]]:
    """The sources behind an edge that a caller may see (memory's turn, or the graph's sources)."""
    out = [{k: v for k, v in s.items() if k != "source"} for e in _seen(d, "ev", lens) for s in e.get("sources") or []]
    if d.get("turn") and can_see(d.get("turn_scopes") or d.get("scopes"), lens):
        out.insert(0, {"kind": "turn", "id": d["turn"]})
    return out[:20]


def active(d: dict[str, Any]) -> bool:
    """In lists and search: not merged away, and mentioned by someone (or edited by a caller)."""
    return not d.get("merged_into") and (not d.get("dormant") or bool(d.get("edited")))


class EntityService(BaseService):
    def _lens(self, caller: Caller) -> list[list[str]]:
        return self.identity.read_lens(caller, None)

    def _get(self, caller: Caller, eid: str) -> Item:
        """The entity as the caller may see it, following a merge; else not found (whatever the reason). An id
        of the old form (`Person:jane smith`) leads to the entity kept under it, or else to the one its type
        and name make now."""
        asked = eid
        for step in range(10):
            item = self.records.get(caller.context_id, "entity", eid)
            if item is None and step == 0 and is_legacy_entity(eid):
                etype, _, name = eid.partition(":")
                eid = self.ids.entity(caller.context_id, etype, name)
                item = self.records.get(caller.context_id, "entity", eid)
            if item is None or not can_see(item.data.get("scopes"), self._lens(caller)):
                break
            if not item.data.get("merged_into"):
                if not active(item.data):
                    break
                return item
            eid = item.data["merged_into"]
        raise NotFound(f"Entity with ID {asked!r} not found")

    def _visible(self, caller: Caller) -> list[Item]:
        lens = self._lens(caller)
        return [
            i
            for i in scan(self.records, caller.context_id, "entity")
            if active(i.data) and can_see(i.data.get("scopes"), lens)
        ]

    # -- reads -----------------------------------------------------------------------------

    def query(self, caller: Caller, name: str, etype: str | None) -> dict[str, Any]:
        folded = fold(name)
        if not folded:
            raise InvalidInput("name is empty")
        found: dict[str, Item] = {}
        for entry in scan(self.records, caller.context_id, "ealias", prefix=folded + "|"):
            try:
                item = self._get(caller, entry.data["entity"])
            except NotFound:
                continue
            if etype is None or item.data["type"].lower() == etype.lower():
                found[item.id] = item
        if not found:
            raise NotFound(f"no entity named {name!r}" + (f" of type {etype!r}" if etype else ""))
        lens = self._lens(caller)
        best = max(found.values(), key=lambda i: (mention_count(i.data, lens), i.id))
        return {"entity": public(best, lens)}

    def search(self, caller: Caller, query: str, etype: str | None, limit: int) -> dict[str, Any]:
        lens = self._lens(caller)
        with embedding_errors():
            vector = query_vector(self.embedder, query, ranks=True)
        meta = {"type": etype} if etype else {}
        q = SearchQuery(
            caller.context_id,
            query,
            vector,
            "hybrid" if vector is not None else "bm25",
            limit,
            ("entity",),
            lens,
            None,
            meta,
        )
        results = []
        for h in self.index.search(q, self.clock.now()):
            item = self.records.get(caller.context_id, "entity", h.id)
            if item is None or not active(item.data) or not can_see(item.data.get("scopes"), lens):
                continue
            seen = public(item, lens)
            results.append({k: seen[k] for k in ("id", "name", "type", "description", "aliases", "mention_count")}
                           | {"score": h.score})  # fmt: skip
        return {"results": results}

    def relationships(self, caller: Caller, eid: str, direction: str, rtype: str | None) -> dict[str, Any]:
        item = self._get(caller, eid)
        lens = self._lens(caller)
        out = []
        for rel in scan(self.records, caller.context_id, "relation"):
            d = rel.data
            if not current_edge(d) or not can_see(d.get("scopes"), lens) or (rtype is not None and d["type"] != rtype):
                continue
            src, dst = ends(d)
            for way, me, other, shown in (("outgoing", src, dst, d["to"]), ("incoming", dst, src, d["from"])):
                if me != item.id or direction not in (way, "both"):
                    continue
                target = self._peer(caller, other, shown)
                out.append(
                    {"id": rel.id, "type": d["type"], "direction": way, "target": target, "since": d.get("since"),
                     "evidence": evidence(d, lens)}
                )  # fmt: skip
        return {"entity_id": item.id, "relationships": out}

    def _peer(self, caller: Caller, eid: str, shown: list[str]) -> dict[str, Any]:
        try:
            peer = self._get(caller, eid)
            return {"id": peer.id, "name": peer.data["name"], "type": peer.data["type"]}
        except NotFound:  # an entity the caller may not see is named by the relation alone
            return {"id": eid, "name": shown[1], "type": shown[0]}

    def list(self, caller: Caller, etype: str | None, sort: str, limit: int, offset: int) -> dict[str, Any]:
        items = [i for i in self._visible(caller) if etype is None or i.data["type"].lower() == etype.lower()]
        lens = self._lens(caller)
        key = {
            "name": lambda i: (fold(i.data["name"]), i.id),
            "mention_count": lambda i: (-mention_count(i.data, lens), i.id),
            "created_at": lambda i: (created_at(i.data, lens) or "", i.id),
        }[sort]
        items.sort(key=key)
        page = items[offset : offset + limit]
        entities = [{k: public(i, lens)[k] for k in ("id", "name", "type", "mention_count")} for i in page]
        return {"entities": entities, "total": len(items), "has_more": offset + limit < len(items)}

    def graph(self, caller: Caller, etype: str | None, limit: int) -> dict[str, Any]:
        """The graph as the caller sees it, for a picture: the `limit` entities most mentioned (of `etype`), and
        the current edges between two of them, each weighed by the evidence the caller may see."""
        lens = self._lens(caller)
        items = [i for i in self._visible(caller) if etype is None or i.data["type"].lower() == etype.lower()]
        items.sort(key=lambda i: (-mention_count(i.data, lens), i.id))
        nodes = [{k: public(i, lens)[k] for k in ("id", "name", "type", "mention_count")} for i in items[:limit]]
        kept = {n["id"] for n in nodes}
        edges = []
        for rel in scan(self.records, caller.context_id, "relation"):
            d = rel.data
            if not current_edge(d) or not can_see(d.get("scopes"), lens):
                continue
            src, dst = ends(d)
            if src in kept and dst in kept and src != dst:
                edges.append({"id": rel.id, "source": src, "target": dst, "type": d["type"],
                              "weight": max(1, len(evidence(d, lens)))})  # fmt: skip
        return {"nodes": nodes, "edges": edges, "total_entities": len(items)}

    # -- writes ----------------------------------------------------------------------------

    def update(
        self, caller: Caller, eid: str, name: str | None, description: str | None, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Name, description, metadata (merged into what is there); a new name keeps the old one as an
        alias, so lookups by either find the entity. One version-checked transaction. Only a key that sees all
        of the entity may change it (`_whole`): another scope's view never changes."""

        def attempt() -> dict[str, Any]:
            item = self._get(caller, eid)
            self._whole(caller, item)
            d = dict(item.data)
            changed, writes = [], []
            now = self.clock.now()
            if name is not None and name.strip() and name != d["name"]:
                if fold(name) not in {fold(a) for a in [d["name"], *d.get("aliases", [])]}:
                    alias = alias_entry(item.id, d["type"], name)
                    writes.append(Write(caller.context_id, "ealias", f"{fold(name)}|{item.id}", alias, caller.actor))
                d["aliases"] = _unique([*d.get("aliases", []), d["name"]], name)
                d["name"] = name
                changed.append("name")
            if description is not None and description != d.get("description"):
                d["description"] = description
                changed.append("description")
            if metadata:
                d["metadata"] = {**(d.get("metadata") or {}), **metadata}
                changed.append("metadata")
            if changed:
                # a caller's entity: it stays in lists and search, for the editor's scopes, when nobody mentions it
                d["edited"] = True
                mine = scope_set(self.identity.write_scopes(caller, None))
                d["edits"] = {**(d.get("edits") or {}), mine: 1}
                d["first"] = first_fed(d, mine, now)
                d["scopes"] = sorted({p for k in [*(d.get("mentions") or {}), *(d.get("gm") or {}), *d["edits"]]
                                      for p in k.split("|") if p})  # fmt: skip
                writes.insert(0, Write(caller.context_id, "entity", item.id, d, caller.actor, item.version))
                self._commit(caller.context_id, writes, now, [item.id])
            return {"entity_id": item.id, "updated_fields": changed}

        return on_conflict(attempt)  # a mention or another update came between: apply this one to it

    def _whole(self, caller: Caller, *items: Item) -> tuple[Item, ...]:
        """Refuse (409 `in_use`, saying nothing of what the key cannot see) to change an entity unless the key
        sees all of it: every mention, and every relation and memory attribute about it. A shared entity
        changes only within the caller's view, never another scope's. Returns the relations of the context."""
        lens, ids = self._lens(caller), {i.id for i in items}
        relations = tuple(r for r in scan(self.records, caller.context_id, "relation") if not r.data.get("merged_into"))
        keys = [k for i in items for f in ("mentions", "gm", "edits") for k in (i.data.get(f) or {})]
        unseen = any(not can_see(key.split("|"), lens) for key in keys)
        unseen = unseen or any(not can_see(r.data.get("scopes"), lens) for r in relations if set(ends(r.data)) & ids)
        unseen = unseen or any(
            not can_see(a.data.get("scopes"), lens)
            for a in scan(self.records, caller.context_id, "attribute")
            if a.data.get("entity") in ids
        )
        if unseen:
            raise Conflict("this entity is in use beyond what this key can see; it cannot be changed with this key",
                           code="in_use")  # fmt: skip
        return relations

    def merge(self, caller: Caller, keep_id: str, remove_id: str) -> dict[str, Any]:
        """The removed entity's name and aliases become the kept one's aliases, its mentions add up, its
        relationships and the memory attributes about it move over (without duplicates), and it stays as a
        pointer to the kept one. Version-checked; the pointer is written last. Only a key that sees all of
        both entities may merge them (`_whole`)."""
        keep, gone = self._get(caller, keep_id), self._get(caller, remove_id)
        if keep.id == gone.id:
            raise InvalidInput("keep_id and remove_id are the same entity")
        relations = self._whole(caller, keep, gone)
        ctx, now = caller.context_id, self.clock.now()
        k, g = dict(keep.data), gone.data
        before = len(k.get("aliases", []))
        k["aliases"] = _unique([*k.get("aliases", []), g["name"], *g.get("aliases", [])], k["name"])
        mentions = dict(k.get("mentions") or {})
        for key, n in (g.get("mentions") or {}).items():
            mentions[key] = mentions.get(key, 0) + n
        k["mentions"] = mentions
        for field in ("gm", "minfo"):  # the sources' counts, sentences and spellings add up per scope set
            merged = {key: dict(v) for key, v in (k.get(field) or {}).items()}
            for key, v in (g.get(field) or {}).items():
                mine = merged.setdefault(key, {"n": 0, "sentence": "", "sources": [], "aliases": {}} if field == "gm"
                                         else {"sentence": "", "sources": []})  # fmt: skip
                mine["sentence"] = mine.get("sentence") or v.get("sentence") or ""
                mine["sources"] = [*mine.get("sources", []), *v.get("sources", [])][-10:]
                if field == "gm":
                    mine["n"] = int(mine.get("n", 0)) + int(v.get("n", 0))
                    mine["aliases"] = {**v.get("aliases", {}), **mine.get("aliases", {})}
            k[field] = merged
        first = {**(g.get("first") or {}), **(k.get("first") or {})}  # each scope set's earliest
        for key, at in (g.get("first") or {}).items():
            first[key] = min(first[key], at)
        k["first"] = first
        k["edits"] = {**(g.get("edits") or {}), **(k.get("edits") or {})}
        k["metadata"] = {**(g.get("metadata") or {}), **(k.get("metadata") or {})}
        k["description"] = k.get("description") or g.get("description") or ""
        k["scopes"] = sorted(set(k.get("scopes") or []) | set(g.get("scopes") or []))
        writes = [Write(ctx, "entity", keep.id, k, caller.actor, keep.version)]
        for alias in [g["name"], *g.get("aliases", [])]:
            writes.append(
                Write(ctx, "ealias", f"{fold(alias)}|{keep.id}", alias_entry(keep.id, k["type"], alias), caller.actor)
            )
        moved, seen = 0, set()
        existing = {(ends(r.data)[0], r.data["type"], ends(r.data)[1]) for r in relations}
        for rel in relations:
            d = dict(rel.data)
            joined = list(ends(d))
            if gone.id not in joined:
                continue
            kept_end = [k["type"], k["name"]]
            if joined[0] == gone.id:
                d["from"], joined[0] = kept_end, keep.id
            if joined[1] == gone.id:
                d["to"], joined[1] = kept_end, keep.id
            d["ends"] = joined
            triple = (joined[0], d["type"], joined[1])
            if triple in existing or triple in seen or triple[0] == triple[2]:
                writes.append(
                    Write(
                        ctx,
                        "relation",
                        rel.id,
                        dict(rel.data, merged_into=keep.id, scopes=d["scopes"]),
                        caller.actor,
                        rel.version,
                    )
                )
            else:
                writes.append(Write(ctx, "relation", rel.id, d, caller.actor, rel.version))
                moved += 1
            seen.add(triple)
        for attr in scan(self.records, ctx, "attribute"):
            if attr.data.get("entity") == gone.id:
                writes.append(
                    Write(ctx, "attribute", attr.id, dict(attr.data, entity=keep.id), caller.actor, attr.version)
                )
        pointer = dict(g, merged_into=keep.id)
        writes.append(Write(ctx, "entity", gone.id, pointer, caller.actor, gone.version))
        step = self.records.max_writes - 1
        for i in range(0, len(writes), step):  # the pointer last: its transaction indexes both ends
            part = writes[i : i + step]
            if i + step >= len(writes):
                self._commit(ctx, part, now, [keep.id, gone.id])
            else:
                self.records.transact(part, now)
        return {
            "kept_entity_id": keep.id,
            "removed_entity_id": gone.id,
            "aliases_merged": len(k["aliases"]) - before,
            "relationships_transferred": moved,
        }

    def _commit(self, ctx: str, writes: Sequence[Write], now: Any, ids: Sequence[str]) -> None:
        """Commit with a safety net that brings the entities' index documents up to date
        (`engram.kernel.unit_of_work`)."""
        net = (INDEX_JOB, {"context_id": ctx, "ids": ids})
        UnitOfWork(self.records, self.queue).commit(writes, now, reindex=lambda _: self._reindex(ctx, ids), net=net)

    def _reindex(self, ctx: str, ids: Sequence[str]) -> None:
        """The entities' index documents as their records are now: out of the index when merged away or dormant."""
        found = self.records.get_many(ctx, "entity", ids)
        gone = [eid for eid in ids if eid not in found or not active(found[eid].data)]
        if gone:
            self.index.delete(ctx, gone)
        docs = [index_doc(ctx, eid, found[eid].data) for eid in ids if eid not in gone]
        if docs:
            vectors = self.embedder.embed([d.text for d in docs]) if self.embedder is not None else [None] * len(docs)
            self.index.upsert([d.with_vector(v) for d, v in zip(docs, vectors, strict=True)])

    def index_job(self, payload: dict[str, Any]) -> None:
        self._reindex(payload["context_id"], list(payload["ids"]))


def _unique(names: list[str], but: str) -> list[str]:
    """`names` without repeats (as lookups compare them) and without `but`, in order."""
    seen, out = {fold(but)}, []
    for n in names:
        if fold(n) not in seen:
            seen.add(fold(n))
            out.append(n)
    return out
