"""The workspace family's eraser (`engram.trust.erasure`): a subject's files — every version, the windows of each in
the index, the import edges of their workspace, and their content blobs (named by the file and the bytes' hash;
a blob of the older kind, named by the hash alone, stays while another file refers to it) — its collaboration
sessions with their operation logs, counters and snapshots, and its decisions (records and index documents).

Order, so that a rerun finds what is left: for each file (a unit) its index windows, edges and unshared blobs
(found through its versions), then the file; each session's log, then the session; each batch of decisions, their
index documents, then the decisions.

Its reindexer (`reindex`, `engram.search.reindex`) names the jobs that index the family's objects
again from the store."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from engram.families.workspace import DECISION_JOB, INDEX_JOB
from engram.families.workspace.collab import CLOCK, DECISION, OP, SESSION, SNAP
from engram.families.workspace.shapes import DEP, FILE, SEP, context_wide
from engram.kernel.ports import Item
from engram.kernel.scan import every
from engram.kernel.services import BaseService
from engram.search.reindex import Keep, Reindex, batches, by_ids, object_key
from engram.trust.erasure import Subject, Unit, batched, mine


class WorkspaceErasing(BaseService):
    def reindex(self, ctx: str, keep: Keep) -> Iterator[Reindex]:
        """The kept files' windows and decisions indexed again (`engram.search.reindex`)."""
        for batch in batches(self.records, ctx, FILE, keep):
            objects = {object_key(i): (i.version, tuple(f"{i.id}#{n}" for n in range(int(i.data.get("chunks") or 0))))
                       for i in batch}  # fmt: skip
            yield Reindex(INDEX_JOB, {"context_id": ctx, "ids": [i.id for i in batch]}, objects)
        yield from by_ids(DECISION_JOB, self.records, ctx, DECISION, keep)

    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        files: list[Item] = []
        others: list[Item] = []
        for item in every(self.records, ctx, FILE):
            (files if subject.takes(item) else others).append(item)
        shared: set[str] | None = None  # the context-wide blobs others' files refer to, read at the first one
        for f in files:
            versions = self.records.history(ctx, FILE, f.id) or [f]
            windows = [f"{f.id}#{n}" for n in range(max(int(v.data.get("chunks") or 0) for v in versions))]
            keys = {str(v.data["blob_key"]) for v in versions if v.data.get("blob_key")}
            if shared is None and any(map(context_wide, keys)):
                shared = self._shared(ctx, others)
            blobs = sorted(keys - (shared or set()))
            prefix = f.id[: len(f.id) - len(str(f.data["path"]))]  # the workspace's part of the id
            edges = [f"{prefix}{d}{SEP}{f.data['path']}" for d in {d for v in versions for d in v.data.get("deps", [])}]
            edges += self.records.ids(ctx, DEP, f"{f.id}{SEP}", limit=100_000)  # its importers' edges
            counts = {"records": {FILE: 1, DEP: len(edges)}, "versions": {FILE: len(versions)},
                      "index": {"wchunk": len(windows)}, "blobs": {FILE: len(blobs)}}  # fmt: skip
            yield Unit(counts, partial(self._file, ctx, f.id, windows, blobs, edges))
        for s in [s for s in every(self.records, ctx, SESSION) if subject.takes(s)]:
            log = [(k, i) for k in (OP, CLOCK, SNAP) for i in self.records.ids(ctx, k, f"{s.id}|", limit=10**9)]
            counts = {"records": {SESSION: 1, **{k: sum(1 for kind, _ in log if kind == k) for k in (OP, CLOCK, SNAP)}}}
            yield Unit(counts, partial(self._session, ctx, s.id, log))
        yield from batched(self.records, ctx, DECISION, mine(self.records, ctx, DECISION, subject), self.index.delete)

    def _shared(self, ctx: str, others: list[Item]) -> set[str]:
        """The blobs others' files refer to, in any version (a file written once has no other version to read):
        only blobs of the older kind, named by their bytes alone, can be among them."""
        shared: set[str] = set()
        for o in others:
            versions = self.records.history(ctx, FILE, o.id) if o.version > 1 else [o]
            shared |= {str(v.data.get("blob_key")) for v in versions or [o]}
        return shared

    def _file(self, ctx: str, file_id: str, windows: list[str], blobs: list[str], edges: list[str]) -> None:
        for start in range(0, len(windows), 500):
            self.index.delete(ctx, windows[start : start + 500])
        self.records.purge_many(ctx, DEP, edges)
        for key in blobs:
            self.blobs.erase(key)
        self.records.purge(ctx, FILE, file_id)

    def _session(self, ctx: str, session_id: str, log: list[tuple[str, str]]) -> None:
        for kind in (OP, CLOCK, SNAP):
            self.records.purge_many(ctx, kind, [i for k, i in log if k == kind])
        self.records.purge(ctx, SESSION, session_id)
