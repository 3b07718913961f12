"""`engram keys` and `engram scopes` commands (in process, on a temporary data dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.cli.main import main
from engram.settings import Settings
from engram.wiring import build_local


def test_keys_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--data-dir", str(tmp_path)]
    assert main(["keys", "create", *d, "--context", "acme", "--principal", "agent", "--grant", "org/acme"]) == 0
    secret = capsys.readouterr().out.strip().splitlines()[-1]
    assert secret.startswith("sk-")
    assert main(["keys", "list", *d]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (
        len(listed) == 1
        and listed[0]["principal"] == "agent"
        and "role" not in listed[0]
        and secret not in json.dumps(listed)
    )
    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    assert engram.identity.authenticate(secret).role == "agent"
    assert main(["keys", "revoke", *d, listed[0]["key_id"]]) == 0
    from engram.kernel.errors import Unauthenticated

    with pytest.raises(Unauthenticated):
        engram.identity.authenticate(secret)
    assert main(["keys", "revoke", *d, "key_nope"]) == 2
    assert "no key" in capsys.readouterr().err


def test_scopes_create_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--data-dir", str(tmp_path)]
    assert main(["scopes", "create", *d, "--context", "acme", "org/acme/user/alice", "org/acme/team/eng"]) == 0
    capsys.readouterr()
    assert main(["scopes", "list", *d, "--context", "acme"]) == 0
    assert capsys.readouterr().out.split() == ["org/acme/team/eng", "org/acme/user/alice"]
    assert main(["scopes", "create", *d, "--context", "acme", "bad path"]) == 2
    assert main(["keys", "create", *d, "--context", "Bad Ctx", "--principal", "agent", "--grant", "org/a"]) == 2


def test_a_server_settles_what_it_loaded_to_start() -> None:
    """`engram serve`/`stdio` move what starting loaded out of the collector's generations (`process.settle`), so a
    full collection walks only what came after."""
    import gc

    from engram.cli.process import settle

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        settle()
        assert gc.get_freeze_count() > 1000  # modules, functions, schemas
    finally:
        gc.unfreeze()
