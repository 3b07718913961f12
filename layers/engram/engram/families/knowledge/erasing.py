"""The knowledge family's eraser (`engram.erasure`): a subject's documents — every version, the chunks and blob
of each version, their index documents, processing state, lookup entries, content-hash and externalId pointers
— and its folders and collections (with their fences, whose ids hold their names). What a document fed the
entity graph is the entities family's to erase.

Order, so that a rerun finds what is left: for each document, index documents, chunks, blobs, state, entries
and pointers (all found through the document's versions), then the document; containers last."""

from __future__ import annotations

from engram.erasure import Counts, Subject, add, every
from engram.families.knowledge.base import LOOKUP, chunk_key
from engram.kernel import BaseService
from engram.ports import Item, Write

CONTAINERS = ("folder", "collection")


class KnowledgeErasing(BaseService):
    def erase(self, ctx: str, subject: Subject, dry_run: bool) -> Counts:
        counts: Counts = {}
        docs: list[Item] = []
        others: list[Item] = []
        for d in every(self.records, ctx, "document"):
            (docs if subject.takes(d) else others).append(d)
        owned = {d.id for d in docs}
        entries = [i.id for i in every(self.records, ctx, LOOKUP) if i.data.get("owner") in owned]
        pointers = [(k, i.id) for k in ("hash", "extid") for i in every(self.records, ctx, k)
                    if i.data.get("document_id") in owned]  # fmt: skip
        by_kind = {k: sum(1 for p in pointers if p[0] == k) for k in ("hash", "extid")}
        add(counts, {"records": {LOOKUP: len(entries), **by_kind}})
        plans: list[tuple[str, list[str], list[str]]] = []
        for doc in docs:
            versions = self.records.history(ctx, "document", doc.id) or [doc]
            chunks = sorted({chunk_key(v.data, p) for v in versions for p in range(int(v.data.get("chunks") or 0))})
            blobs = sorted({str(v.data["blob_key"]) for v in versions if v.data.get("blob_key")})
            plans.append((doc.id, chunks, blobs))
            add(counts, {"records": {"document": 1, "chunk": len(chunks)}, "versions": {"document": len(versions)},
                         "index": {"chunk": len(chunks)}, "blobs": {"document": len(blobs)}})  # fmt: skip
        containers = [(k, c) for k in CONTAINERS for c in every(self.records, ctx, k)
                      if subject.takes(c)]  # fmt: skip
        # a container another scope's documents are in stays, with their scopes only (a collection holds the
        # scopes of every document in it)
        users = {kind: {str(d.data.get(field)): set(d.data.get("scopes") or []) for d in others}
                 for kind, field in (("collection", "collection"), ("folder", "folder_id"))}  # fmt: skip
        kept = {(k, c.id): sorted(users[k][c.id]) for k, c in containers if c.id in users[k]}
        for kind, item in containers:
            add(counts, {"changed" if (kind, item.id) in kept else "records": {kind: 1}})
        if dry_run:
            return counts
        for kind, id_ in [(LOOKUP, e) for e in entries] + pointers:
            self.records.purge(ctx, kind, id_)
        for doc_id, chunks, blobs in plans:
            self._document(ctx, doc_id, chunks, blobs)
        for kind, item in containers:
            if (kind, item.id) in kept:
                data = dict(item.data, scopes=kept[(kind, item.id)])
                self.records.transact([Write(ctx, kind, item.id, data, "erasure", item.version)], self.clock.now())
                self.records.squash(ctx, kind, item.id)
                continue
            self.records.purge(ctx, "fence", f"{kind}:{item.id}")
            self.records.purge(ctx, kind, item.id)
        return counts

    def _document(self, ctx: str, doc_id: str, chunks: list[str], blobs: list[str]) -> None:
        for start in range(0, len(chunks), 500):
            self.index.delete(ctx, chunks[start : start + 500])
        for chunk in chunks:
            self.records.purge(ctx, "chunk", chunk)
        for key in blobs:
            self.blobs.erase(key)
        self.records.purge(ctx, "docstate", doc_id)
        self.records.purge(ctx, "document", doc_id)
