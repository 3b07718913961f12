"""Shared objects as sets of parts (DESIGN §9): what several scopes feed — an entity, an edge — keeps, per scope set
(`"org/acme/user/alice|org/acme/project/x"`), what that set's writers said of it, and each part is read, exported
and erased on its own. A kind is shared when it declares so (`engram.kernel.kinds.Kind.shared`).

Fields keyed by a scope set (`PARTS`): memory's `mentions` (counts) and `minfo` (a sentence and the turns), the
graph's `gm` (mentions by sources) and `ev` (evidence for an edge), callers' `edits` (entity_update), and `first`
(when the set first fed the object: the `created_at` each reader is shown). What callers wrote into the object
itself (`WRITTEN`: description, metadata, the aliases they added) belongs to the sets in `edits`; everything else
(`type`, `name`, an edge's ends) names the object and is no one's part.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PARTS = ("mentions", "minfo", "gm", "ev", "edits", "first")
WRITTEN = ("description", "metadata", "aliases", "edited")  # callers' edits, the `edits` sets' together
DERIVED = ("scopes", "created_at")  # worked out from the parts

Owns = Callable[[list[str]], bool]  # whether a scope set (its paths) is the part-holder's


def parts_keys(data: dict[str, Any], field: str) -> list[str]:
    return list((data.get(field) or {}).keys())


def scopes_of(data: dict[str, Any]) -> list[str]:
    """The scopes the parts give an object: every path of every set that still says something of it (`first`
    and `minfo` only accompany another part)."""
    keys = [k for name in PARTS if name not in ("minfo", "first") for k in (data.get(name) or {})]
    return sorted({p for k in keys for p in k.split("|") if p})


def without(data: dict[str, Any], owns: Owns) -> tuple[dict[str, Any], list[str], bool]:
    """(the data without the parts `owns` names, the scopes left, whether any part was one of them). What callers
    wrote into it goes with any editing set that goes — which editor wrote today's description is not kept, so
    it is not left to speak for the erased one; the editors left keep `edits` and may write it again."""
    out, touched = dict(data), False
    for name in PARTS:
        field = data.get(name) or {}
        kept = {k: v for k, v in field.items() if not owns(k.split("|"))}
        if len(kept) != len(field):
            out[name], touched = kept, True
    if len(out.get("edits") or {}) != len(data.get("edits") or {}):
        out.update(description="", metadata={}, aliases=[], edited=bool(out.get("edits")))
    left = scopes_of(out)
    if not any(data.get(name) for name in PARTS if name not in ("minfo", "first")):
        left = [t for t in data.get("scopes") or [] if not owns([t])]  # no parts: the object's own tags
    return out, left, touched or owns(list(data.get("scopes") or []))


def part_of(data: dict[str, Any], owns: Owns) -> dict[str, Any]:
    """Only the parts `owns` names, with what names the object (a subject's export of a shared object): what
    callers wrote only when every editing set is among them, and the scopes of those parts."""
    out = {k: v for k, v in data.items() if k not in PARTS and k not in WRITTEN and k not in DERIVED}
    for name in PARTS:
        mine = {k: v for k, v in (data.get(name) or {}).items() if owns(k.split("|"))}
        if mine:
            out[name] = mine
    edits = parts_keys(data, "edits")
    if edits and all(owns(k.split("|")) for k in edits):
        out |= {k: data[k] for k in WRITTEN if k in data}
    out["scopes"] = scopes_of(out)
    return out
