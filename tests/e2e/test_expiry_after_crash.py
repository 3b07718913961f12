"""#53: the sweep of a memory that expires is work queued with its write: acknowledged, then the server killed
(-9) before it is due, a restarted server sweeps it when it is — nothing acknowledged is lost, not even a
deletion that was promised."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from engram.devserver import cli, start, stop
from engram.settings import Settings
from engram.wiring import build_local

pytestmark = pytest.mark.e2e
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def store(url: str, key: str, arguments: dict[str, object]) -> dict[str, object]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "memory_store", "arguments": arguments},
    }
    answer = httpx.post(url + "/mcp", json=body, headers={**HEADERS, "Authorization": f"Bearer {key}"}, timeout=60)
    result = answer.json()["result"]
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


def test_a_promised_expiry_survives_a_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = cli("keys", "create", "--context", "acme", "--principal", "agent", "--grant", "org/acme", data_dir=data)
    key = key.strip().splitlines()[-1]
    proc, url = start(data)
    kept = store(url, key, {"content": "I live in Lisbon."})
    gone = store(url, key, {"content": "My hotel room is 412.", "ttl_seconds": 4})
    os.kill(proc.pid, signal.SIGKILL)  # before the sweep is due
    proc.wait()
    proc, url = start(data)
    try:
        engram = build_local(Settings(data_dir=data, embedder="none", queue_worker=False))
        deadline = time.monotonic() + 60
        while engram.records.get("acme", "turn", str(gone["turn_id"])) is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert engram.records.get("acme", "turn", str(gone["turn_id"])) is None  # swept by the restarted server
        assert engram.records.get("acme", "turn", str(kept["turn_id"])) is not None
    finally:
        stop(proc)
