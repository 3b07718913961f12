"""`engram workspace import PATH`: a source tree in, `.gitignore` honoured, `.git` and binary files left out,
the import graph built across the tree, keyword search at once and semantic search once it reports done."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.cli.main import main
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import build_local


def test_import_a_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "tree"
    (src / "app" / "core").mkdir(parents=True)
    (src / "build").mkdir()
    (src / ".git").mkdir()
    (src / ".gitignore").write_text("build/\n*.log\n")
    (src / "app" / ".gitignore").write_text("secret.py\n")
    (src / "app" / "main.py").write_text("from app.core import engine\n\nengine.start()\n")
    (src / "app" / "core" / "engine.py").write_text('def start():\n    """Spin up the turbine engine."""\n')
    (src / "app" / "secret.py").write_text("KEY = 'x'\n")
    (src / "app" / "broken.py").write_text("def f(:\n")
    (src / "build" / "gen.py").write_text("X = 1\n")
    (src / "run.log").write_text("log\n")
    (src / ".git" / "HEAD").write_text("ref\n")
    (src / "logo.png").write_bytes(b"\x89PNG\x00\x01")
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, queue_worker=False))
    key, principal = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    monkeypatch.setenv("ENGRAM_API_KEY", key)
    assert main(["workspace", "import", str(src), "--data-dir", str(data), "--prefix", "repo"]) == 0
    assert "imported 5, failed 0" in capsys.readouterr().out
    again = build_local(Settings(data_dir=data, queue_worker=False))
    caller = again.identity.enter(principal, "acme", ANY, "t")
    assert sorted(again.workspace.paths(caller)) == [
        "repo/.gitignore", "repo/app/.gitignore", "repo/app/broken.py", "repo/app/core/engine.py", "repo/app/main.py"
    ]  # fmt: skip
    assert again.workspace.file(caller, "repo/app/broken.py").data["syntax_valid"] is False
    assert again.workspace.dependents_of(caller, "repo/app/core/engine.py") == ["repo/app/main.py"]
    hits = again.workspace.search_chunks(caller, "spin up the turbine", "vector", 3)
    assert hits and hits[0].metadata["path"] == "repo/app/core/engine.py"  # embedded before the command ended
