"""Every kind of record, declared once: the family that owns it and how a caller's visibility reaches it.

- `scoped`: the record carries its own `scopes` (every write of it must) and `engram.kernel.scopes.can_see`
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

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from engram.kernel.metering import charge


@dataclass(frozen=True)
class Kind:
    family: str
    access: Literal["scoped", "via", "context", "system"]
    via: str | None = None
    indexed: bool = False  # documents of this kind go to the search index (each with its object's scopes)
    blobs: bool = False  # its versions name blobs (`blob_key`): an erasure looks for those after
    shared: bool = False  # several scopes feed it, part by part (`engram.kernel.parts`): read, exported, erased so


# The kernel's own kinds; every family declares its own with its package (`engram.kernel.family`), and the
# composition root makes the catalogue of all of them once (`Kinds`).
KERNEL_KINDS: Mapping[str, Kind] = MappingProxyType(
    {
        "key": Kind("identity", "system"),
        "scope": Kind("identity", "system"),
        "issuer": Kind("identity", "system"),  # OAuth issuers trusted per context (engram.trust.oauth)
        "quota": Kind("identity", "system"),  # quotas per context and per key (engram.trust.quotas)
        "idkey": Kind("identity", "system"),  # the context's key of ids made from words (engram.kernel.opaque)
        "job": Kind("queue", "system"),
    }
)


class Kinds(Mapping[str, Kind]):
    """Every declared kind — the kernel's and each family's — made once by the composition root and handed to what
    reads it (the stores' guards, erasure, export); no module-level registry. A kind declared twice, differently, is
    refused."""

    def __init__(self, *declared: Mapping[str, Kind]) -> None:
        kinds = dict(KERNEL_KINDS)
        for more in declared:
            for name, kind in more.items():
                if name in kinds and kinds[name] != kind:
                    raise ValueError(f"kind {name!r} declared twice, differently")
                kinds[name] = kind
        self._kinds = kinds

    def __getitem__(self, name: str) -> Kind:
        return self._kinds[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def check(self, kind: str, data: dict[str, Any] | None, index: bool = False) -> None:
        """Refuse what no write may be: an undeclared kind, a scoped kind (or an index document) without scopes."""
        declared = self._kinds.get(kind)
        if declared is None or (index and not declared.indexed):
            raise UndeclaredKind(f"kind {kind!r} is not declared (engram.kernel.kinds)")
        if data is not None and (declared.access == "scoped" or index) and not data.get("scopes"):
            raise UndeclaredKind(f"a {kind!r} is written without scopes: every write of a scoped kind carries them")


class UndeclaredKind(ValueError):
    """A write of a kind nobody declared, or of a scoped kind without its scopes: a bug, refused."""


_READS = frozenset({"get", "get_many", "history", "history_page", "query", "count", "ids", "version_counts"})


def _charged(method: Any, field: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        charge(field)
        return method(*args, **kwargs)

    return call


class Guarded:
    """A record store that refuses a write `check` refuses (everything else passes through); its reads and
    writes charge the running call's cost (`engram.kernel.metering`)."""

    def __init__(self, store: Any, kinds: Kinds) -> None:
        self._store, self.kinds = store, kinds
        self.max_writes = store.max_writes

    def transact(self, writes: Sequence[Any], now: datetime) -> Any:
        for w in writes:
            self.kinds.check(w.kind, None if (w.remove or w.check) else w.data)
        charge("store_writes", len(writes))
        return self._store.transact(writes, now)

    def restore(self, context_id: str, objects: Sequence[Sequence[Any]]) -> int:
        for versions in objects:
            self.kinds.check(versions[-1].kind, versions[-1].data)
        charge("store_writes", sum(len(v) for v in objects))
        return int(self._store.restore(context_id, objects))

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        return _charged(found, "store_reads") if name in _READS else found


class GuardedIndex:
    """A search index that refuses a document `check` refuses (everything else passes through)."""

    def __init__(self, index: Any, kinds: Kinds) -> None:
        self._index, self.kinds = index, kinds

    @property
    def rules(self) -> Any:
        """The index's hybrid rules (`SearchIndex.rules`): read and set on the index itself."""
        return self._index.rules

    @rules.setter
    def rules(self, value: Any) -> None:
        self._index.rules = value

    def upsert(self, docs: Sequence[Any], closing: Sequence[Any] = ()) -> Any:
        for d in docs:
            self.kinds.check(d.kind, {"scopes": d.scopes}, index=True)
        charge("index_calls")
        return self._index.upsert(docs, closing)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._index, name)
        return _charged(found, "index_calls") if callable(found) and not name.startswith("_") else found
