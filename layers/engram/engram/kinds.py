"""Every kind of record, declared once: the family that owns it and how a caller's visibility reaches it.

- `scoped`: the record carries its own `scopes` (every write of it must) and `engram.scopes.can_see`
  decides who sees it.
- `via`: the record is seen through another kind (a chunk through its document, a slot through its
  attribute, a document's processing state through the document).
- `context`: read by every caller of its context, written by its management principal only (a schema:
  the context's type definitions, as a database's callers read its tables' definitions).
- `system`: not an object any caller reads (keys, registered scope paths, queue jobs, dedup pointers
  that only ever lead to a record checked with `can_see`).

`tests/contract/test_scope_probes.py` checks that no write of a scoped kind goes without scopes; a new
family adds its kinds here and its objects to the probe suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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
    "wsession": Kind("workspace", "scoped"),
    "wop": Kind("workspace", "via", "wsession"),
    "wclock": Kind("workspace", "via", "wsession"),
    "wsnap": Kind("workspace", "via", "wsession"),
    "decision": Kind("workspace", "scoped"),
    "key": Kind("identity", "system"),
    "scope": Kind("identity", "system"),
    "job": Kind("queue", "system"),
}


def scoped(kind: str) -> bool:
    """Whether a record of `kind` must carry scopes. An undeclared kind is an error: declare it first."""
    return KINDS[kind].access == "scoped"
