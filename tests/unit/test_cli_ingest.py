"""`engram ingest`: files and folders, a progress bar, a summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.cli.main import main
from engram.settings import Settings
from engram.wiring import build_local
from tests.fixtures.files import RETURNS_PDF, make_pdf


def test_ingest_folder_reports_ingested_deduplicated_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, embedder="none"))
    key, _ = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "returns.pdf").write_bytes(make_pdf(RETURNS_PDF))
    (docs / "notes.md").write_text("# Notes\nCheck the tyre pressure.")
    (docs / "copy.md").write_text("# Notes\nCheck the tyre pressure.")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 nope")
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")
    code = main(["ingest", "--data-dir", str(data), "--key", key, str(docs)])
    out = capsys.readouterr()
    assert code == 1  # one file failed
    assert "ingested: 2  deduplicated: 1  failed: 1" in out.out
    assert "broken.pdf" in out.out and "4/4" in out.err
    assert "embedding 2/2 documents" in out.err  # the wait for vectors shows how far it is
