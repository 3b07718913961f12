"""What memory and the graph write of an entity when a source names it: which entity a type and name mean (its
opaque id, `engram.kernel.opaque`, or one kept under its old id), the mention counted per scope set with the sentence
and source a caller who may see it is shown, the lookup entries of its spellings, the ids of a relation's ends.
The reads (`engram.families.entities.service`) show these parts to each caller by the scope sets it sees."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Any, Protocol

from engram.kernel.clock import iso
from engram.kernel.opaque import is_legacy_entity, legacy_entity
from engram.kernel.ports import IndexDoc


class Plan(Protocol):
    """The writes of one memory transaction (`engram.families.memory.service._Plan`)."""

    ctx: str
    now: datetime

    def entity_id(self, etype: str, name: str) -> str: ...

    def get(self, kind: str, id_: str) -> dict[str, Any] | None: ...
    def put(self, kind: str, id_: str, data: dict[str, Any]) -> None: ...
    def index(self, doc: IndexDoc, embed_text: str) -> None: ...


def fold(name: str) -> str:
    """A name as lookups compare it: case and accents aside, spaces collapsed."""
    decomposed = unicodedata.normalize("NFKD", name.casefold())
    return " ".join("".join(ch for ch in decomposed if not unicodedata.combining(ch)).split())


def ends(d: dict[str, Any]) -> tuple[str, str]:
    """The entity ids a relation joins (a relation written before `ends` was kept: from its ends' names)."""
    kept = d.get("ends")
    if kept:
        return str(kept[0]), str(kept[1])
    return legacy_entity(*d["from"]), legacy_entity(*d["to"])


def alias_entry(eid: str, etype: str, alias: str) -> dict[str, str]:
    """An `ealias` record's data: the entity a spelling leads to, and its type (the id says nothing of it)."""
    return {"entity": eid, "alias": alias, "type": etype}


def alias_type(data: dict[str, Any]) -> str:
    """The type of the entity an `ealias` record leads to (one written before it said so: from the id)."""
    eid = str(data.get("entity", ""))
    return str(data.get("type") or (eid.split(":", 1)[0] if is_legacy_entity(eid) else ""))


def resolved(plan: Plan, etype: str, name: str) -> str:
    """The id of the entity memory means by this type and name: the opaque id; one kept under its old id (made
    before ids were opaque) if only that is there; then, if merged away, the one it went into. Reads through the
    plan (read-your-writes), so `mention` and the writes after it agree."""
    eid = plan.entity_id(etype, name)
    if plan.get("entity", eid) is None and plan.get("entity", legacy_entity(etype, name)) is not None:
        eid = legacy_entity(etype, name)
    current = plan.get("entity", eid)
    if current is not None and current.get("merged_into"):
        eid = str(current["merged_into"])
    return eid


def parts_of(d: dict[str, Any]) -> set[str]:
    """The scope sets that fed an entity (`engram.kernel.parts`): memory's mentions, the graph's sources, edits."""
    return {k for f in ("mentions", "gm", "minfo", "edits") for k in (d.get(f) or {})}


def entity_text(d: dict[str, Any]) -> str:
    """What the index holds of an entity: its name, aliases and description — and the sentences that named it
    when one scope set alone fed it (then whoever may see the entity may see that part: a search ranks by what
    was said of it, as a Cortex client asks, and never by another scope's words)."""
    said: list[str] = []
    if len(parts_of(d)) == 1:
        names = [d["name"], *d.get("aliases", [])]
        said = [_about(str(e.get("sentence") or ""), names) for f in ("gm", "minfo") for e in (d.get(f) or {}).values()]
    return " ".join([d["name"], *d.get("aliases", []), d.get("description") or "", *said]).strip()


def _about(sentence: str, names: list[str]) -> str:
    """What a sentence says of the entity it names: from its name on ("Jane Smith is a software engineer at Acme"
    describes Jane Smith; of Acme it says only its name); nothing when it does not spell the name (a turn a person
    said about someone else is not about the speaker's own entity)."""
    low = sentence.casefold()
    at = min((i for i in (low.find(n.casefold()) for n in names if n) if i >= 0), default=-1)
    return sentence[at:] if at >= 0 else ""


def index_doc(ctx: str, eid: str, d: dict[str, Any]) -> IndexDoc:
    return IndexDoc(ctx, "entity", eid, entity_text(d), None, d["scopes"], None, None, {"type": d["type"]})


def mention(
    plan: Plan,
    etype: str,
    name: str,
    touched: bool,
    tags: list[str],
    sentence: str = "",
    source: dict[str, str] | None = None,
) -> str:
    """What memory writes when a turn mentions an entity: created (with its name's lookup entry), or its
    mention counted and its scopes widened to those of the turn; `sentence` and `source` (the turn) are what a
    caller who may see the turn is shown of it. A name that was merged away counts for the entity it was
    merged into."""
    eid = resolved(plan, etype, name)
    current = plan.get("entity", eid)
    key = scope_set(tags)
    if current is None:
        data: dict[str, Any] = {
            "type": etype,
            "name": name,
            "aliases": [],
            "description": "",
            "metadata": {},
            "mentions": {key: 1},
            "first": {key: iso(plan.now)},
            "created_at": iso(plan.now),
            "scopes": sorted(tags),
        }
        _note(data, key, sentence, source)
        plan.put("entity", eid, data)
        plan.put("ealias", f"{fold(name)}|{eid}", alias_entry(eid, etype, name))
        plan.index(index_doc(plan.ctx, eid, data), entity_text(data))
        return "created"
    scopes = sorted(set(current.get("scopes") or []) | set(tags))
    mentions = dict(current.get("mentions") or {})
    mentions[key] = mentions.get(key, 0) + 1
    data = dict(current, scopes=scopes, mentions=mentions, dormant=False, first=first_fed(current, key, plan.now))
    _note(data, key, sentence, source)
    plan.put("entity", eid, data)
    if (  # the index filters by scopes, and holds a lone part's sentence (`entity_text`)
        scopes != sorted(current.get("scopes") or []) or current.get("dormant") or parts_of(data) != parts_of(current)
    ):
        plan.index(index_doc(plan.ctx, eid, data), entity_text(data))
    return "updated" if touched else "unchanged"


def _note(data: dict[str, Any], key: str, sentence: str, source: dict[str, str] | None) -> None:
    """Memory's sentence and source for a scope set: the first sentence, the last sources."""
    if not sentence and source is None:
        return
    info = {k: dict(v) for k, v in (data.get("minfo") or {}).items()}
    entry = info.setdefault(key, {"sentence": "", "sources": []})
    entry["sentence"] = entry["sentence"] or sentence[:240]
    if source is not None:
        entry["sources"] = [*[s for s in entry["sources"] if s.get("id") != source.get("id")], source][-10:]
    data["minfo"] = info


def scope_set(tags: list[str]) -> str:
    return "|".join(sorted(set(tags)))


def first_fed(data: dict[str, Any], key: str, now: datetime) -> dict[str, str]:
    """`first` (when each scope set first fed the entity: `engram.kernel.parts`) with `key`'s, if it is new."""
    first = dict(data.get("first") or {})
    first.setdefault(key, str(iso(now)))
    return first
