"""#53: `engram backup` of a served process's data while a client keeps writing to it, and `engram restore`: every
memory acknowledged before the backup began is in it, the copy passes its checks, the restored folder serves them;
a changed backup, or a restore over data without --force, is refused."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.cli.devserver import cli, serve
from engram.cli.main import main
from engram.settings import Settings
from engram.wiring import build_local

pytestmark = pytest.mark.e2e
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def store(url: str, key: str, text: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "memory_store", "arguments": {"content": text}}}  # fmt: skip
    answer = httpx.post(url + "/mcp", json=body, headers={**HEADERS, "Authorization": f"Bearer {key}"}, timeout=60)
    result = answer.json()["result"]
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


def test_a_backup_taken_while_writing_holds_what_was_acknowledged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    key = cli("keys", "create", "--context", "acme", "--principal", "agent", "--grant", "org/acme", data_dir=data)
    key = key.strip().splitlines()[-1]
    acknowledged: list[tuple[float, str]] = []
    stop = threading.Event()
    with serve(data) as url:

        def writer() -> None:
            n = 0
            while not stop.is_set():
                text = f"Note number {n}: the okapi count is {n * 7}."
                store(url, key, text)
                acknowledged.append((time.monotonic(), text))
                n += 1

        thread = threading.Thread(target=writer)
        thread.start()
        while len(acknowledged) < 15:
            time.sleep(0.05)
        began = time.monotonic()
        assert main(["backup", "--to", str(tmp_path / "copy"), "--data-dir", str(data)]) == 0
        ended = time.monotonic()
        time.sleep(0.5)
        stop.set()
        thread.join()
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["files"] >= 4 and said["bytes"] > 0
    before = {text for at, text in acknowledged if at < began}
    assert ended > began
    assert len(before) >= 15 and len(acknowledged) > len(before)  # the writer went on while the copy was made

    restored = tmp_path / "restored"
    assert main(["restore", "--from", str(tmp_path / "copy"), "--data-dir", str(restored)]) == 0
    engram = build_local(Settings(data_dir=restored, embedder="none", queue_worker=False))
    turns = {i.data["content"] for i in engram.records.query("acme", "turn", limit=1000).items}
    assert before <= turns  # nothing acknowledged before the backup began is missing
    assert turns <= {text for _, text in acknowledged}  # and nothing half-written is there
    docs = engram.index.documents("acme", None, 10_000)
    assert {d.id for d in docs if d.kind == "turn"} == {
        i.id for i in engram.records.query("acme", "turn", limit=1000).items
    }  # the index made again from the records: it holds what they hold


def test_a_changed_backup_or_a_restore_over_data_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, embedder="none", queue_worker=False))
    engram.identity.register_scopes("acme", ["org/acme/user/alice"])
    assert main(["backup", "--to", str(tmp_path / "copy"), "--data-dir", str(data)]) == 0
    assert main(["backup", "--to", str(tmp_path / "copy"), "--data-dir", str(data)]) == 2  # not into a full folder
    assert main(["restore", "--from", str(tmp_path / "copy"), "--data-dir", str(data), "--no-reindex"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["restore", "--from", str(tmp_path / "copy"), "--data-dir", str(data), "--force", "--no-reindex"]) == 0
    assert list(tmp_path.glob("data.before-restore-*"))  # what was there is kept aside
    db = tmp_path / "copy" / "records.db"
    raw = bytearray(db.read_bytes())
    raw[-100] ^= 0xFF
    db.write_bytes(bytes(raw))
    assert main(["restore", "--from", str(tmp_path / "copy"), "--data-dir", str(tmp_path / "new")]) == 2
    assert "changed since it was taken" in capsys.readouterr().err
