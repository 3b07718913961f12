"""#54 (one item of it): a document committed just before a crash — its writer died before putting its chunks in
the index — is found by keyword as soon as its recovered embedding job starts, not only when the embedding of
its thousands of chunks ends."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engram.families.knowledge.base import NewDocument
from engram.families.knowledge.embedding import EMBED_SLICE
from engram.kernel.ports import SearchQuery
from engram.settings import Settings
from engram.wiring import Engram, build_local
from tests.contract.conftest import two_agents


class Watching:
    """An embedder (unit vectors from a hash: this test is of the job's order, not of the model) that looks, at its
    first call, whether the document is already found by keyword."""

    model_id, dim = "watching", 8

    def __init__(self) -> None:
        self.engram: Engram | None = None
        self.found_before_vectors: bool | None = None

    def embed(self, texts: Any) -> Any:
        if self.found_before_vectors is None and self.engram is not None:
            q = SearchQuery("acme", "zanzibar okapi", None, "bm25", 5, None, [["org/acme"]])
            self.found_before_vectors = bool(self.engram.index.search(q, datetime.now(UTC)))
        rows = [np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(8).astype(np.float32) for t in texts]
        return np.asarray([r / np.linalg.norm(r) for r in rows])


def test_a_recovered_job_makes_the_document_searchable_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    watching = Watching()
    e = build_local(Settings(data_dir=tmp_path, queue_worker=False), embedder=watching)  # type: ignore[arg-type]
    watching.engram = e
    alice, _ = two_agents(e)
    monkeypatch.setattr(type(e.documents), "_searchable_now", lambda *a: None)  # the writer dies after its commit
    words = " ".join(f"paragraph{n} talks about ledgers and quarterly figures in some detail" for n in range(9000))
    doc = e.documents.ingest(alice, NewDocument(f"The zanzibar okapi. {words}".encode(), "Big report"))
    chunks = int(e.records.get("acme", "document", doc["id"]).data["chunks"])  # type: ignore[union-attr]
    assert chunks > EMBED_SLICE  # a long embedding
    watching.found_before_vectors = None  # what the ingest itself embedded does not count
    e.queue.join()  # the recovered job
    assert watching.found_before_vectors is True
    assert e.documents.get(alice, doc["id"])["status"] == "indexed"
