"""Erasure (issue #27), the kernel's part: what a subject is, which objects are its, and how a family's eraser
answers.

A subject is a scope path (`org/acme/user/alice`): an object is the subject's when any of its scope tags is the
path or lies below it (a memory tagged alice AND project apollo is alice's too). A principal named by its
`externalId` is its ownership path (`lookup_principal`).

Each family that holds scoped objects declares an eraser (`Family.eraser`): a service method
`(context_id, subject) -> Iterable[Unit]` that finds the subject's objects and plans their erasure everywhere the
family keeps them (every version, lookup entries, index documents, blobs, what its objects fed to other families)
as units: what a unit erases (`Counts`) and the step that erases it. A preview adds the units' counts up; an
erasure runs each unit, then counts it (`apply`), so what a receipt says was erased is what the steps that
finished erased — a run that fails half way through a family keeps the counts of the units it finished, and the
next run plans from what is left. A step is idempotent and erases its unit's parts before the object that leads
to them (a record still there leads back to everything of it). `found` counts, for a family without an eraser
yet, what it holds of the subject: an erasure that would leave it is refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from engram.kernel.errors import InvalidInput
from engram.kernel.kinds import Kinds
from engram.kernel.ports import Item, RecordStore
from engram.kernel.scan import every
from engram.kernel.scopes import check_path, covers
from engram.search.terms import STOP_WORDS, WORD, stem

Counts = dict[str, dict[str, int]]
"""store ("records", "versions", "index", "blobs", "jobs") -> kind -> how many."""
BATCH = 500  # objects a unit of a bulk kind erases


@dataclass(frozen=True)
class Unit:
    """A part of an erasure: what it erases, and the step that erases it (idempotent)."""

    counts: Mapping[str, Mapping[str, int]]
    step: Callable[[], object]


Eraser = Callable[[str, "Subject"], Iterable[Unit]]


def nothing() -> None:
    """The step of a unit that erases nothing more (its counts were erased by the steps before)."""


def apply(units: Iterable[Unit], dry_run: bool, done: Callable[[Unit], None] | None = None) -> Counts:
    """What the units erase, added up; unless `dry_run`, each unit's step run first, then `done` told of it."""
    counts: Counts = {}
    for unit in units:
        if not dry_run:
            unit.step()
            if done is not None:
                done(unit)
        add(counts, unit.counts)
    return counts


@dataclass(frozen=True)
class Subject:
    """A scope path (everything tagged with it or below it), or the ids of objects (those objects, whatever
    their scopes, and their parts)."""

    scope: str | None = None
    ids: tuple[str, ...] = ()
    region: tuple[str, ...] = ()  # subjects named by ids: the asking key's grant (its parts of shared objects)

    def __post_init__(self) -> None:
        if (self.scope is None) == (not self.ids):
            raise InvalidInput("a subject is a scope path or a list of object ids (one of them)")
        if self.scope is not None:
            check_path(self.scope)

    def owns(self, tags: Iterable[str] | None) -> bool:
        """Whether an object with these scope tags is the subject's (a scope subject only)."""
        return self.scope is not None and any(covers(self.scope, t) for t in tags or ())

    def owns_part(self, tags: Iterable[str] | None) -> bool:
        """Whether a part of a shared object (`engram.kernel.parts`), fed under these scope tags, is the subject's:
        for a scope subject as `owns`; for objects named by ids, a part inside the asking key's grant (`region`; none:
        the operator's, every part)."""
        if self.scope is not None:
            return self.owns(tags)
        return not self.region or any(covers(r, t) for r in self.region for t in tags or ())

    def takes(self, item: Item) -> bool:
        """Whether a family's object is the subject's: by its scopes, or by its id."""
        return item.id in self.ids if self.ids else self.owns(item.data.get("scopes"))

    def describe(self) -> dict[str, Any]:
        """What a request keeps of the subject (the ids themselves: a receipt hashes them)."""
        if self.scope is not None:
            return {"scope": self.scope}
        return {"ids": list(self.ids)} | ({"region": list(self.region)} if self.region else {})

    @staticmethod
    def of(described: Mapping[str, Any]) -> Subject:
        return Subject(described.get("scope"), tuple(described.get("ids") or ()), tuple(described.get("region") or ()))


def add(total: Counts, more: Mapping[str, Mapping[str, int]]) -> Counts:
    for store, kinds in more.items():
        for kind, n in kinds.items():
            if n:
                total.setdefault(store, {})[kind] = total.get(store, {}).get(kind, 0) + n
    return total


def mine(records: RecordStore, context_id: str, kind: str, subject: Subject) -> list[str]:
    """The ids of the subject's items of a kind (expired ones too)."""
    return [item.id for item in every(records, context_id, kind) if subject.takes(item)]


def pointing(
    records: RecordStore, context_id: str, fields: Iterable[tuple[str, str]], owned: set[str]
) -> dict[str, list[tuple[str, str]]]:
    """The items that point at the owned objects (lookup entries, pointers), by the object: `fields` names each
    kind and the field of its data that holds the object's id; the answer maps an object id to (kind, id) pairs."""
    out: dict[str, list[tuple[str, str]]] = {}
    for kind, field in fields:
        for item in every(records, context_id, kind):
            if item.data.get(field) in owned:
                out.setdefault(str(item.data[field]), []).append((kind, item.id))
    return out


def batched(
    records: RecordStore,
    context_id: str,
    kind: str,
    ids: list[str],
    index: Callable[[str, list[str]], None] | None = None,
    parts: Callable[[list[str]], tuple[Counts, Callable[[], object]]] | None = None,
) -> Iterator[Unit]:
    """Units of up to `BATCH` of a kind's objects, each with its versions (counted, not read); each step erases
    the objects' index documents (`index`: the index's delete), then their `parts` (counts and a step, for the
    objects of the batch), then the objects."""
    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]
        counts: Counts = {"records": {kind: len(batch)}, "versions": {kind: sum(records.version_counts(
            context_id, kind, batch).values())}}  # fmt: skip
        if index is not None:
            add(counts, {"index": {kind: len(batch)}})
        part_counts, part_step = parts(batch) if parts is not None else ({}, nothing)
        add(counts, part_counts)

        def step(batch: list[str] = batch, part_step: Callable[[], object] = part_step) -> None:
            if index is not None:
                index(context_id, batch)
            part_step()
            records.purge_many(context_id, kind, batch)

        yield Unit(counts, step)


def found(records: RecordStore, kinds: Kinds, context_id: str, subject: Subject, family: str) -> Counts:
    """What a family's scoped kinds hold of the subject (latest items), by reading them: for a family that has
    no eraser, and for checking one."""
    counts: Counts = {}
    for object_ in owned_objects(records, kinds, context_id, subject, [family]):
        name = object_.partition(":")[0]
        counts.setdefault("records", {})[name] = counts.get("records", {}).get(name, 0) + 1
    return counts


def owned_objects(
    records: RecordStore, kinds: Kinds, context_id: str, subject: Subject, families: Iterable[str]
) -> list[str]:
    """`kind:id` of every object of the subject (the families' scoped kinds; their parts follow them)."""
    wanted = set(families)
    return sorted(
        f"{name}:{item.id}"
        for name, kind in kinds.items()
        if kind.family in wanted and kind.access == "scoped"
        for item in every(records, context_id, name)
        if subject.takes(item)
    )


MAX_TEXT = 200_000  # characters of the subject's content read for its distinctive words


def texts(value: Any) -> Iterator[str]:
    """The strings of a record's data (scopes and ids aside)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "scopes" and not k.endswith("id"):
                yield from texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)


def distinctive_words(
    records: RecordStore,
    context_id: str,
    objects: Iterable[str],
    counts: Callable[[list[str]], Mapping[str, int]],
    n: int = 12,
) -> list[str]:
    """The subject's rarest words (a surface form of each of the `n` stems fewest documents of the context hold,
    one at least): what a search for a trace of it asks. Kept in memory by the erasure job only, never stored."""
    surface: dict[str, str] = {}
    read = 0
    for object_ in objects:
        kind, _, id_ = object_.partition(":")
        item = records.get(context_id, kind, id_)
        for text in texts(item.data if item is not None else {}):
            read += len(text)
            for word in WORD.findall(text.lower()):
                if word not in STOP_WORDS and len(word) > 2 and not word.isdigit():
                    surface.setdefault(stem(word), word)
            if read > MAX_TEXT:
                break
        if read > MAX_TEXT:
            break
    df = counts(sorted(surface))
    held = [s for s in surface if df.get(s, 0) > 0]  # a word the index holds nowhere finds no trace (ids, hashes)
    return [surface[s] for s in sorted(held, key=lambda s: (df[s], s))[:n]]


def digest(ids: Iterable[str]) -> str:
    """The SHA-256 of the sorted ids, one a line: what a receipt says of the objects without naming them."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def total(counts: Mapping[str, Mapping[str, int]]) -> int:
    return sum(n for kinds in counts.values() for n in kinds.values())


def receipt_body(request: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt of a finished request, before its signature."""
    return {
        "type": "engram.trust.erasure.receipt",
        "request_id": request["request_id"],
        "context_id": request["context_id"],
        "subject": request["subject"]
        if "ids" not in request["subject"]
        else {"objects": len(request["subject"]["ids"]), "ids_sha256": digest(request["subject"]["ids"])},
        "requested_by": request["requested_by"],
        "erased": request["erased"],
        "objects": request.get("objects", 0),
        "objects_sha256": request.get("objects_sha256", digest(())),
        "traces": request.get("traces", {}),
        "started_at": request["started_at"],
        "finished_at": request["finished_at"],
    }
