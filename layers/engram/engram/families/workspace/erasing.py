"""The workspace family's eraser (`engram.erasure`): a subject's files — every version, the windows of each in
the index, the import edges of their workspace, and each content blob no one else's file refers to (blobs are
named by their content's hash, so the same bytes in another workspace share one) — its collaboration sessions
with their operation logs, counters and snapshots, and its decisions (records and index documents).

Order, so that a rerun finds what is left: for each file its index windows, edges and unshared blobs (found
through its versions), then the file; each session's log, then the session; decisions' index documents, then
the decisions."""

from __future__ import annotations

from engram.erasure import Counts, Subject, add, every
from engram.families.workspace.collab import CLOCK, DECISION, OP, SESSION, SNAP
from engram.families.workspace.shapes import DEP, FILE, SEP
from engram.kernel import BaseService
from engram.ports import Item


class WorkspaceErasing(BaseService):
    def erase(self, ctx: str, subject: Subject, dry_run: bool) -> Counts:
        counts: Counts = {}
        files: list[Item] = []
        others: list[Item] = []
        for item in every(self.records, ctx, FILE):
            (files if subject.takes(item) else others).append(item)
        shared = {str(v.data.get("blob_key")) for o in others for v in self.records.history(ctx, FILE, o.id) or [o]}
        plans = []
        for f in files:
            versions = self.records.history(ctx, FILE, f.id) or [f]
            windows = [f"{f.id}#{n}" for n in range(max(int(v.data.get("chunks") or 0) for v in versions))]
            blobs = sorted({str(v.data["blob_key"]) for v in versions if v.data.get("blob_key")} - shared)
            prefix = f.id[: len(f.id) - len(str(f.data["path"]))]  # the workspace's part of the id
            edges = [f"{prefix}{d}{SEP}{f.data['path']}" for d in {d for v in versions for d in v.data.get("deps", [])}]
            edges += self.records.ids(ctx, DEP, f"{f.id}{SEP}", limit=100_000)  # its importers' edges
            plans.append((f.id, windows, blobs, edges))
            add(counts, {"records": {FILE: 1, DEP: len(edges)}, "versions": {FILE: len(versions)},
                         "index": {"wchunk": len(windows)}, "blobs": {FILE: len(blobs)}})  # fmt: skip
        sessions = [s for s in every(self.records, ctx, SESSION) if subject.takes(s)]
        logs = {s.id: [(k, i) for k in (OP, CLOCK, SNAP) for i in self.records.ids(ctx, k, f"{s.id}|", limit=10**9)]
                for s in sessions}  # fmt: skip
        decisions = [d.id for d in every(self.records, ctx, DECISION) if subject.takes(d)]
        add(
            counts, {"records": {SESSION: len(sessions), DECISION: len(decisions)}, "index": {DECISION: len(decisions)}}
        )
        for kind in (OP, CLOCK, SNAP):
            add(counts, {"records": {kind: sum(1 for log in logs.values() for k, _ in log if k == kind)}})
        if dry_run:
            return counts
        for file_id, windows, blobs, edges in plans:
            for start in range(0, len(windows), 500):
                self.index.delete(ctx, windows[start : start + 500])
            for edge in edges:
                self.records.purge(ctx, DEP, edge)
            for key in blobs:
                self.blobs.erase(key)
            self.records.purge(ctx, FILE, file_id)
        for s in sessions:
            for kind, id_ in logs[s.id]:
                self.records.purge(ctx, kind, id_)
            self.records.purge(ctx, SESSION, s.id)
        if decisions:
            self.index.delete(ctx, decisions)
        for id_ in decisions:
            self.records.purge(ctx, DECISION, id_)
        return counts
