"""The knowledge family's eraser (`engram.trust.erasure`): a subject's documents — every version, the chunks and blob
of each version, their index documents, processing state, lookup entries, content-hash and externalId pointers
— and its folders and collections (with their fences, whose ids hold their names). What a document fed the
entity graph is the entities family's to erase.

Order, so that a rerun finds what is left: for each document (a unit), its entries and pointers, index documents,
chunks, blobs and state (all found through the document and its versions), then the document; containers last.

Its reindexer (`reindex`, `engram.search.reindex`) names the jobs that index the family's objects
again from the store."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from engram.families.knowledge import EMBED_JOB
from engram.families.knowledge.base import LOOKUP, chunk_key
from engram.kernel.ports import Item, Write
from engram.kernel.scan import every
from engram.kernel.services import BaseService
from engram.search.reindex import Keep, Reindex, batches, object_key
from engram.trust.erasure import Subject, Unit, pointing

CONTAINERS = ("folder", "collection")
POINTERS = (LOOKUP, "hash", "extid")


class KnowledgeErasing(BaseService):
    def reindex(self, ctx: str, keep: Keep) -> Iterator[Reindex]:
        """The kept documents' chunks indexed again (`engram.search.reindex`), by the current version's embedding job
        (which also says the document is indexed); a deleted document has none."""
        for batch in batches(self.records, ctx, "document", keep):
            for doc in batch:
                chunks = tuple(chunk_key(doc.data, p) for p in range(int(doc.data.get("chunks") or 0)))
                if doc.data.get("status") == "deleted":
                    yield Reindex(None, {}, {object_key(doc): (doc.version, ())})
                else:
                    payload = {"context_id": ctx, "document_id": doc.id, "version": doc.version}
                    yield Reindex(EMBED_JOB, payload, {object_key(doc): (doc.version, chunks)})

    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        docs: list[Item] = []
        others: list[Item] = []
        for d in every(self.records, ctx, "document"):
            (docs if subject.takes(d) else others).append(d)
        pointers = pointing(self.records, ctx, ((LOOKUP, "owner"), ("hash", "document_id"), ("extid", "document_id")),
                            {d.id for d in docs})  # fmt: skip
        for doc in docs:
            versions = self.records.history(ctx, "document", doc.id) or [doc]
            chunks = sorted({chunk_key(v.data, p) for v in versions for p in range(int(v.data.get("chunks") or 0))})
            blobs = sorted({str(v.data["blob_key"]) for v in versions if v.data.get("blob_key")})
            its = pointers.get(doc.id, [])
            counts = {"records": {"document": 1, "chunk": len(chunks), **{k: sum(1 for p in its if p[0] == k)
                                                                           for k in POINTERS}},
                      "versions": {"document": len(versions)}, "index": {"chunk": len(chunks)},
                      "blobs": {"document": len(blobs)}}  # fmt: skip
            yield Unit(counts, partial(self._document, ctx, doc.id, chunks, blobs, its))
        containers = [(k, c) for k in CONTAINERS for c in every(self.records, ctx, k)
                      if subject.takes(c)]  # fmt: skip
        # a container another scope's documents are in stays, with their scopes only (a collection holds the
        # scopes of every document in it)
        users = {kind: {str(d.data.get(field)): set(d.data.get("scopes") or []) for d in others}
                 for kind, field in (("collection", "collection"), ("folder", "folder_id"))}  # fmt: skip
        for kind, item in containers:
            if item.id in users[kind]:
                yield Unit({"changed": {kind: 1}}, partial(self._keep, ctx, kind, item, sorted(users[kind][item.id])))
            else:
                yield Unit({"records": {kind: 1}}, partial(self._container, ctx, kind, item.id))

    def _document(self, ctx: str, doc_id: str, chunks: list[str], blobs: list[str],
                  pointers: list[tuple[str, str]]) -> None:  # fmt: skip
        for kind, id_ in pointers:
            self.records.purge(ctx, kind, id_)
        for start in range(0, len(chunks), 500):
            self.index.delete(ctx, chunks[start : start + 500])
        self.records.purge_many(ctx, "chunk", chunks)
        for key in blobs:
            self.blobs.erase(key)
        self.records.purge(ctx, "docstate", doc_id)
        self.records.purge(ctx, "document", doc_id)

    def _keep(self, ctx: str, kind: str, item: Item, scopes: list[str]) -> None:
        """A container others' documents are in: their scopes only, its older versions gone."""
        data = dict(item.data, scopes=scopes)
        self.records.transact([Write(ctx, kind, item.id, data, "erasure", item.version)], self.clock.now())
        self.records.squash(ctx, kind, item.id)

    def _container(self, ctx: str, kind: str, id_: str) -> None:
        self.records.purge(ctx, "fence", f"{kind}:{id_}")
        self.records.purge(ctx, kind, id_)
