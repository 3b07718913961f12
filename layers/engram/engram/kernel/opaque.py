"""Ids that carry no content (DESIGN §9): an object whose id was made from what a person wrote — an entity from
its type and name, an edge from its ends and type — gets `ent_` / `rel_` and 26 characters of a keyed hash of
those words instead, so audit entries, logs and URLs that hold the id hold nothing of the words.

The hash is HMAC-SHA256 (`cryptography`) under a key of the context's own, made at random on first use and
kept in the context as a record (kind `idkey`), so:
- the same words give the same id in every process and Lambda instance, and concurrent writers of one new
  name meet on one item (the conditional write settles it) as they did when the id was the name;
- nobody without the key can test a guessed name against an id (a plain hash of a name could be);
- a context moved to another deployment takes its key along, and its ids stay what they were.

What Engram wrote before this (`Person:jane smith`, `rel:alice:lives_in:berlin`) still resolves: `legacy_entity`
names the old id, which readers try when the new one is not there.
"""

from __future__ import annotations

import base64
import os
import threading

from cryptography.hazmat.primitives import hashes, hmac

from engram.kernel.clock import Clock
from engram.kernel.errors import Conflict
from engram.kernel.ports import RecordStore, Write

KIND, ID = "idkey", "ids"
ENTITY, RELATION = "ent", "rel"
_SEP = "\x1f"  # between the parts hashed: no part's text can move a boundary


def legacy_entity(etype: str, name: str) -> str:
    """The id an entity had before ids were opaque: its type and its name lower-cased."""
    return f"{etype}:{name.lower()}"


def is_legacy_entity(eid: str) -> bool:
    return ":" in eid and not eid.startswith(f"{ENTITY}_")


class OpaqueIds:
    def __init__(self, records: RecordStore, clock: Clock) -> None:
        self._records, self._clock = records, clock
        self._keys: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def key(self, ctx: str) -> bytes:
        """The context's id key: read once a process, made (once, whoever races) when the context has none."""
        with self._lock:
            known = self._keys.get(ctx)
        if known is not None:
            return known
        for _ in range(5):
            item = self._records.get(ctx, KIND, ID)
            if item is not None:
                key = base64.b64decode(item.data["key"])
                break
            fresh = base64.b64encode(os.urandom(32)).decode()
            try:
                self._records.transact([Write(ctx, KIND, ID, {"key": fresh}, "engram", 0)], self._clock.now())
            except Conflict:  # another writer made it first: read theirs
                continue
            key = base64.b64decode(fresh)
            break
        else:
            raise Conflict(f"the id key of {ctx!r} could not be read or made")
        with self._lock:
            self._keys[ctx] = key
        return key

    def make(self, ctx: str, prefix: str, *parts: str) -> str:
        mac = hmac.HMAC(self.key(ctx), hashes.SHA256())
        mac.update(_SEP.join(parts).encode("utf-8", "surrogatepass"))
        return f"{prefix}_{base64.b32encode(mac.finalize()).decode().lower()[:26]}"

    def entity(self, ctx: str, etype: str, name: str) -> str:
        """An entity's id: of its type and its name as lookups compare it (lower-cased)."""
        return self.make(ctx, ENTITY, etype, name.lower())

    def relation(self, ctx: str, *parts: str) -> str:
        return self.make(ctx, RELATION, *parts)
