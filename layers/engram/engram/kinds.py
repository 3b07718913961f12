"""Every kind of record, declared once: the family that owns it and how a caller's visibility reaches it.

- `scoped`: the record carries its own `scopes` (every write of it must) and `engram.scopes.can_see`
  decides who sees it.
- `via`: the record is seen through another kind (a chunk through its document, a slot through its
  attribute, a document's processing state through the document).
- `context`: read by every caller of its context, written by its management principal only (a schema:
  the context's type definitions, as a database's callers read its tables' definitions).
- `system`: not an object any caller reads (keys, registered scope paths, queue jobs, dedup pointers
  that only ever lead to a record checked with `can_see`).

Enforced at run time: the composition root (`engram.wiring`) puts every record store and search index behind
`Guarded` / `GuardedIndex`, which refuse a write of an undeclared kind, and a scoped kind's write or index
document without scopes — on both adapter sets. A new family declares its kinds with its package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True)
class Kind:
    family: str
    access: Literal["scoped", "via", "context", "system"]
    via: str | None = None


KINDS: dict[str, Kind] = {
    "turn": Kind("memory", "scoped"),
    "attribute": Kind("memory", "scoped"),
    "entity": Kind("entities", "scoped"),  # memory records mentions through engram.services.entities
    "relation": Kind("entities", "scoped"),
    "ealias": Kind("entities", "via", "entity"),
    "session": Kind("memory", "scoped"),
    "slot": Kind("memory", "via", "attribute"),
    "document": Kind("knowledge", "scoped"),
    "folder": Kind("knowledge", "scoped"),
    "collection": Kind("knowledge", "scoped"),
    "chunk": Kind("knowledge", "via", "document"),
    "docstate": Kind("knowledge", "via", "document"),
    "dlookup": Kind("knowledge", "via", "document"),
    "hash": Kind("knowledge", "system"),
    "extid": Kind("knowledge", "system"),
    "fence": Kind("knowledge", "system"),
    "ctxkey": Kind("context", "scoped"),
    "thread": Kind("conversation", "scoped"),
    "message": Kind("conversation", "scoped"),
    "schema": Kind("records", "context"),
    "record": Kind("records", "scoped"),
    "rlookup": Kind("records", "via", "record"),
    "rextid": Kind("records", "system"),  # an externalId's record, seen only through can_see
    "wfile": Kind("workspace", "scoped"),
    "wdep": Kind("workspace", "via", "wfile"),
    "wchunk": Kind("workspace", "via", "wfile"),  # a window of a file, in the search index only
    "wsession": Kind("workspace", "scoped"),
    "wop": Kind("workspace", "via", "wsession"),
    "wclock": Kind("workspace", "via", "wsession"),
    "wsnap": Kind("workspace", "via", "wsession"),
    "decision": Kind("workspace", "scoped"),
    "gmention": Kind("entities", "via", "entity"),  # a source's mention, counted on its entity
    "grelev": Kind("entities", "via", "relation"),  # a source's evidence, counted on its edge
    "gsource": Kind("entities", "system"),  # what a source said last (the graph job compares with it)
    "key": Kind("identity", "system"),
    "scope": Kind("identity", "system"),
    "job": Kind("queue", "system"),
}


def scoped(kind: str) -> bool:
    """Whether a record of `kind` must carry scopes. An undeclared kind is an error: declare it first."""
    return KINDS[kind].access == "scoped"


# Index document kinds (the search index holds these; each carries its object's scopes)
INDEX_KINDS = {"turn", "attribute", "entity", "chunk", "message", "record", "wchunk", "decision"}


class UndeclaredKind(ValueError):
    """A write of a kind nobody declared, or of a scoped kind without its scopes: a bug, refused."""


def check(kind: str, data: dict[str, Any] | None, index: bool = False) -> None:
    """Refuse what no write may be: an undeclared kind, a scoped kind (or an index document) without scopes."""
    declared = KINDS.get(kind)
    if declared is None or (index and kind not in INDEX_KINDS):
        raise UndeclaredKind(f"kind {kind!r} is not declared in engram.kinds")
    if data is not None and (declared.access == "scoped" or index) and not data.get("scopes"):
        raise UndeclaredKind(f"a {kind!r} is written without scopes: every write of a scoped kind carries them")


class Guarded:
    """A record store that refuses a write `check` refuses (everything else passes through)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.max_writes = store.max_writes

    def transact(self, writes: Sequence[Any], now: datetime) -> Any:
        for w in writes:
            check(w.kind, None if (w.remove or w.check) else w.data)
        return self._store.transact(writes, now)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class GuardedIndex:
    """A search index that refuses a document `check` refuses (everything else passes through)."""

    def __init__(self, index: Any) -> None:
        self._index = index

    def upsert(self, docs: Sequence[Any], closing: Sequence[Any] = ()) -> Any:
        for d in docs:
            check(d.kind, {"scopes": d.scopes}, index=True)
        return self._index.upsert(docs, closing)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)
