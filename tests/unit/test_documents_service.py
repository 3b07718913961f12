"""DocumentService behaviour that needs control over the queue or the embedder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from engram.families import find
from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Forbidden, InvalidInput
from engram.kernel.ports import Vector
from engram.kernel.queue import StoreQueue
from engram.settings import Settings
from engram.wiring import Engram, build_local


class BrokenEmbedder:
    model_id, dim = "broken", 384

    def embed(self, texts: Sequence[str]) -> Vector:
        if any("explode" in t for t in texts):
            raise RuntimeError("model crashed")
        return np.ones((len(texts), 384), dtype=np.float32) / np.sqrt(384)


def make(tmp_path: Path, embedder: object | None = None) -> tuple[Engram, StoreQueue, Caller]:
    settings = Settings(data_dir=tmp_path, ingest_root=tmp_path / "root", queue_worker=False)
    engram = build_local(settings, embedder=embedder)  # type: ignore[arg-type]
    q = engram.queue
    assert isinstance(q, StoreQueue)
    _, p = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    return engram, q, engram.identity.enter(p, "acme", ANY, "t", transport="stdio")


def test_bm25_first_vectors_after_the_queue_runs(tmp_path: Path) -> None:
    engram, q, caller = make(tmp_path)
    out = engram.documents.ingest(caller, NewDocument(b"Vortex generators energise the boundary layer.", "VG"))
    assert out["status"] == "queued" and q.pending()
    assert engram.documents.search(caller, Search("vortex generators", "bm25", 3))["results"]
    assert engram.documents.search(caller, Search("vortex generators", "vector", 3))["results"] == []
    q.join()
    doc = engram.documents.get(caller, out["id"])
    assert (doc["status"], doc["stage"]) == ("indexed", "vectors")
    assert engram.documents.search(caller, Search("small vanes on a wing", "vector", 3))["results"]


def test_embedding_failure_is_a_failed_status_with_a_reason(tmp_path: Path) -> None:
    engram, q, caller = make(tmp_path, BrokenEmbedder())
    out = engram.documents.ingest(caller, NewDocument(b"this will explode the model", "Boom"))
    q.join()
    doc = engram.documents.get(caller, out["id"])
    assert doc["status"] == "failed" and "RuntimeError" in doc["error"]
    assert engram.documents.search(caller, Search("explode", "bm25", 3))["results"]  # still findable by BM25


def test_file_path_ingest_is_jailed(tmp_path: Path) -> None:
    engram, _q, caller = make(tmp_path)
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "ok.md").write_text("# Ok\nA fine file.")
    (root / ".env").write_text("SECRET=1")
    (tmp_path / "outside.txt").write_text("outside")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    op = find("document_ingest")
    assert op is not None

    def run(path: str) -> object:
        return op.run(
            engram.family_services(op.family), caller, op.input.model_validate({"filePath": path}), lambda *_: None
        )

    assert run("docs/ok.md")["status"] in ("queued", "indexed")  # type: ignore[index]
    for bad in ("../outside.txt", "/etc/passwd", ".env", "link.txt", "docs/../../outside.txt"):
        with pytest.raises(Forbidden):
            run(bad)
    with pytest.raises(InvalidInput):
        run("docs/missing.md")
    http_caller = Caller(caller.principal, "acme", "http")
    with pytest.raises(InvalidInput) as e:
        op.run(
            engram.family_services(op.family),
            http_caller,
            op.input.model_validate({"filePath": "docs/ok.md"}),
            lambda *_: None,
        )
    assert e.value.code == "file_path_http"


def test_collection_stats_say_how_much_is_not_vector_searchable_yet(tmp_path: Path) -> None:
    engram, q, caller = make(tmp_path)
    for i in range(3):
        engram.documents.ingest(caller, NewDocument(f"Note {i} on the flaps.".encode(), f"n{i}", collection="notes"))
    stats = engram.documents.collections(caller, "stats", "notes", None)["collection"]
    assert (stats["document_count"], stats["pending_count"], stats["failed_count"]) == (3, 3, 0)
    q.join()
    stats = engram.documents.collections(caller, "stats", "notes", None)["collection"]
    assert (stats["document_count"], stats["pending_count"]) == (3, 0)
