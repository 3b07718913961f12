"""Rebuilding a context's search index from the record store (`engram admin reindex`).

The search index holds nothing the record store does not: every index document is made from a record (a turn, a
chunk of a document's version, a window of a file, ...). So an index that was lost, emptied or left behind (an
OpenSearch domain replaced, a local `search.db` deleted) is made again from the store, context by context.

Each family that puts documents in the index declares a reindexer (`Family.reindexer`): a service method
`(context_id, keep) -> Iterable[Reindex]` that reads the family's objects, keeps those `keep` accepts, and names
the jobs — its own index jobs, those its writes' safety nets run — that index them again as the store holds them
now, with the index documents each object has. Memory, messages and documents reuse the vectors the index still has
(and make a missing one as their write made it); records, entities, files and decisions are embedded again.

Writes go on meanwhile. A job that read an object just before a write to it, and indexed it just after the write's
own indexing, leaves the older text; one that read an object just before an erasure purged it leaves its documents
back in the index. So after the first pass, `rebuild` reads every object again: one whose version moved since it
was indexed has its documents taken out and indexed again; one gone has its documents taken out. It stops after a
pass that finds nothing to do (then the index is what the store says), or after `ROUNDS` passes, and says how many
objects were still changing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engram.kernel.ports import Item, RecordStore
from engram.kernel.queue import BATCH_JOBS
from engram.kernel.scan import every

if TYPE_CHECKING:
    from engram.wiring import Engram

BATCH = 100  # objects a job indexes
ROUNDS = 5  # passes after the first, looking for objects written while it ran

Keep = Callable[[Item], bool]


@dataclass(frozen=True)
class Reindex:
    """One job of a rebuild (`job` None: nothing to index, the objects' documents only taken out — a document
    deleted since), and the objects it covers: `kind:id` -> (version, the ids of its index documents)."""

    job: str | None
    payload: dict[str, Any]
    objects: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)


Reindexer = Callable[[str, Keep], Iterable[Reindex]]


def object_key(item: Item) -> str:
    return f"{item.kind}:{item.id}"


def batches(records: RecordStore, context_id: str, kind: str, keep: Keep, size: int = BATCH) -> Iterator[list[Item]]:
    """The latest items of a kind in the context that `keep` accepts (expired ones too: the index holds them until
    they are swept), `size` at a time."""
    batch: list[Item] = []
    for item in every(records, context_id, kind):
        if keep(item):
            batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def by_ids(job: str, records: RecordStore, context_id: str, kind: str, keep: Keep) -> Iterator[Reindex]:
    """The usual reindexer's jobs: `job` over the ids of the kept items of `kind` (an item's one index document has
    its id), a batch at a time."""
    for batch in batches(records, context_id, kind, keep):
        objects = {object_key(i): (i.version, (i.id,)) for i in batch}
        yield Reindex(job, {"context_id": context_id, "ids": [i.id for i in batch]}, objects)


def rebuild(
    root: Engram, context_id: str, progress: Callable[[str, int], None] | None = None, rounds: int = ROUNDS
) -> dict[str, Any]:
    """Index every object of the context again, family by family, then settle what writes changed meanwhile.
    Returns the objects indexed per family, the passes after the first, and `unsettled` (objects the last pass
    still found changed: run it again once writes are quiet). `progress(family, objects so far)`."""
    root.index.ensure()
    reindexers: list[tuple[str, Reindexer]] = [
        (fam.name, root.bound(fam, fam.reindexer)) for fam in root.families() if fam.reindexer is not None
    ]
    seen: dict[str, tuple[int, tuple[str, ...]]] = {}

    pending: list[Reindex] = []  # jobs of one name run together (one embedding call for many documents)

    def flush() -> None:
        if pending:
            root.queue.dispatch(str(pending[0].job), [step.payload for step in pending])
            pending.clear()

    def run(step: Reindex) -> None:
        seen.update(step.objects)
        if step.job is not None:
            if pending and (pending[0].job != step.job or len(pending) >= BATCH_JOBS):
                flush()
            pending.append(step)

    indexed: dict[str, int] = {}
    for name, reindexer in reindexers:
        indexed[name] = 0
        for step in reindexer(context_id, lambda _: True):
            run(step)
            indexed[name] += len(step.objects)
            if progress is not None:
                progress(name, indexed[name])
        flush()
    passes, unsettled = 0, 0
    while passes < rounds:
        passes += 1
        present: set[str] = set()
        unsettled = 0
        for _, reindexer in reindexers:
            for step in reindexer(context_id, _moved(seen, present)):
                root.index.delete(context_id, [d for k in step.objects for d in seen[k][1]])
                run(step)
                unsettled += len(step.objects)
            flush()
        gone = [k for k in seen if k not in present]
        if gone:
            root.index.delete(context_id, [d for k in gone for d in seen.pop(k)[1]])
        unsettled += len(gone)
        if not unsettled:
            break
    return {"indexed": indexed, "passes": passes, "unsettled": unsettled}


def _moved(seen: Mapping[str, tuple[int, tuple[str, ...]]], present: set[str]) -> Keep:
    """A later pass's `keep`: an object indexed at another version than it has now (each object read is noted in
    `present`; one indexed and not read again is gone)."""

    def moved(item: Item) -> bool:
        present.add(object_key(item))
        return object_key(item) in seen and seen[object_key(item)][0] != item.version

    return moved
