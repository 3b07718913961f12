"""The knowledge family's embedding jobs: a committed write's chunks indexed with vectors, what it replaced
retired, the document's processing state set."""

from __future__ import annotations

from typing import Any

from engram.families.knowledge import EMBED_JOB
from engram.families.knowledge.base import DocumentsBase, chunk_ids, chunk_prefix
from engram.kernel.ports import IndexDoc
from engram.kernel.queue import past_hand_over
from engram.kernel.unit_of_work import UnitOfWork

EMBED_SLICE = 256  # chunks embedded at a time: a run short of time (the Lambda worker) hands over between slices


class Embedding(DocumentsBase):
    def embed_job(self, payload: dict[str, Any]) -> None:
        self.embed_jobs([payload])

    def _embedding_failed(self, ctx: str, doc_id: str, version: int, exc: Exception) -> None:
        """The document stays findable by BM25; its status says why its vectors did not come."""
        self._set_status(ctx, doc_id, version, "failed", "bm25", f"embedding failed: {type(exc).__name__}")

    @staticmethod
    def _chunk_span(doc: dict[str, Any]) -> dict[str, Any]:
        """A version's chunks as a job names them: their prefix and count, whatever their number (a list of
        20,000 ids went past what an SQS message and a DynamoDB item carry)."""
        return {"prefix": chunk_prefix(doc), "count": int(doc["chunks"])}

    def _retire(self, ctx: str, retire: dict[str, Any]) -> None:
        """What a committed write replaced: its chunks (index and records) and its blob. (`chunks`, a list of
        ids, is how jobs queued before named them.)"""
        ids = list(retire.get("chunks") or [])
        ids += chunk_ids(retire["prefix"], int(retire["count"])) if retire.get("count") else []
        if ids:
            self.index.delete(ctx, ids)
            for cid in ids:
                self.records.purge(ctx, "chunk", cid)
        if retire.get("blob"):
            self.blobs.delete(retire["blob"])

    def embed_jobs(self, payloads: list[dict[str, Any]]) -> None:
        """Finish committed writes: the current version's chunks indexed with vectors (one embedding call
        for all the jobs' chunks: the model is much faster on batches), what they replaced retired, the
        status set. Reads are by key (consistent on every store), never through a query."""
        ready: list[tuple[str, str, int, list[IndexDoc]]] = []
        for p in payloads:
            ctx, doc_id, version = p["context_id"], p["document_id"], int(p["version"])
            self._retire(ctx, p.get("retire") or {})
            item = self.records.get(ctx, "document", doc_id)
            if item is None or item.version != version or item.data["status"] == "deleted":
                continue  # superseded (the newer write's job indexes it) or deleted while queued
            try:
                docs = [self._index_doc(ctx, item.data, c, None) for c in self._chunk_items(ctx, item.data)]
            except Exception as exc:
                self._embedding_failed(ctx, doc_id, version, exc)
                continue
            ready.append((ctx, doc_id, version, docs))
        have: dict[str, Any] = {}
        for ctx, _, _, docs in ready:  # vectors kept from before (a change of metadata only)
            have |= self.index.vectors(ctx, [d.id for d in docs])
        missing = [d for *_, docs in ready for d in docs if d.id not in have]
        if len(missing) > EMBED_SLICE and self.embedder is not None:
            # a long wait for the vectors: the chunks findable by keyword first, as an upload's writer makes them —
            # a job recovered after a crash (its writer died before indexing them) left a committed document
            # listed but not found for minutes (#54); where the writer did, the same documents again
            for ctx, _, _, docs in ready:
                self._index_docs(ctx, [d for d in docs if d.id not in have])
        if missing and self.embedder is not None:
            try:
                for start in range(0, len(missing), EMBED_SLICE):
                    part = missing[start : start + EMBED_SLICE]
                    have |= dict(zip([d.id for d in part], self.embedder.embed([d.text for d in part]), strict=True))
                    if start + EMBED_SLICE < len(missing) and past_hand_over():
                        self._hand_over(ready, have)
                        return
            except Exception as exc:
                for ctx, doc_id, version, docs in ready:  # findable by BM25 all the same
                    self._index_docs(ctx, [d.with_vector(have.get(d.id)) for d in docs])
                    self._embedding_failed(ctx, doc_id, version, exc)
                return
        for ctx, doc_id, version, docs in ready:
            try:
                current = self.records.get(ctx, "document", doc_id)
                if current is None or current.version != version:
                    continue
                self._index_docs(ctx, [d.with_vector(have.get(d.id)) for d in docs])
                stage = "vectors" if self.embedder is not None else "bm25"
                self._set_status(ctx, doc_id, version, "indexed", stage, None)
            except Exception as exc:
                self._embedding_failed(ctx, doc_id, version, exc)

    def _hand_over(self, ready: list[tuple[str, str, int, list[IndexDoc]]], have: dict[str, Any]) -> None:
        """Out of time (the Lambda worker): the chunks embedded so far indexed with their vectors (a current
        version's only), and the documents' jobs queued again — the next run reads those vectors back from the
        index and embeds only the rest. A large document used to be cut off at the time limit every run,
        losing all its vectors each time."""
        now, jobs = self.clock.now(), []
        for ctx, doc_id, version, docs in ready:
            current = self.records.get(ctx, "document", doc_id)
            if current is None or current.version != version:
                continue
            self._index_docs(ctx, [d.with_vector(have[d.id]) for d in docs if d.id in have])
            jobs.append(self.queue.job(EMBED_JOB, {"context_id": ctx, "document_id": doc_id, "version": version}, now))
        if jobs:
            UnitOfWork(self.records, self.queue).commit([], now, jobs=jobs)
