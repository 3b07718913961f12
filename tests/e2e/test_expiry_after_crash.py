"""#53: work queued with a write — the sweep of a memory that expires, a context's export — is acknowledged, the
server killed (-9) before it runs, and a restarted server does it: nothing acknowledged is lost, not even a
deletion that was promised."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from engram.cli.devserver import cli, start, stop
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


def test_a_context_export_queued_before_a_kill_9_finishes_after_the_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    manager = cli("keys", "create", "--context", "acme", "--principal", "management", "--grant", "org/acme",
                  data_dir=data).strip().splitlines()[-1]  # fmt: skip
    proc, url = start(data)
    store(url, manager, {"content": "I live in Lisbon."})
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "context_export", "arguments": {}}}
    headers = {**HEADERS, "Authorization": f"Bearer {manager}"}
    answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=60).json()["result"]["structuredContent"]
    os.kill(proc.pid, signal.SIGKILL)  # acknowledged as queued; perhaps not run
    proc.wait()
    proc, url = start(data)
    try:
        asked = {"name": "context_transfer_status", "arguments": {"transfer_id": answer["transfer_id"]}}
        status = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": asked}
        deadline, state = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            state = httpx.post(url + "/mcp", json=status, headers=headers, timeout=60).json()["result"]
            state = state["structuredContent"]
            if state["status"] == "done":
                break
            time.sleep(0.5)
        assert state["status"] == "done" and state["counts"]["objects"] >= 2, state
    finally:
        stop(proc)
