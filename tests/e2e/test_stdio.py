"""`engram stdio` driven by the SDK's stdio client."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from engram.settings import Settings
from engram.wiring import build_local

pytestmark = pytest.mark.e2e


async def test_stdio_serves_the_same_tools(tmp_path: Path) -> None:
    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    key, _ = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    env = dict(os.environ, ENGRAM_DATA_DIR=str(tmp_path), ENGRAM_API_KEY=key)
    params = StdioServerParameters(command=sys.executable, args=["-m", "engram.cli", "stdio"], env=env)
    async with Client(stdio_client(params), mode="legacy") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"memory_store", "memory_recall", "reconstruct"} <= names
        r = await c.call_tool("memory_store", {"content": "My name is Alice."})
        assert r.structured_content is not None and r.structured_content["attributes"][0]["value"] == "Alice"
        # Vectros' two read-only resources, and an empty prompt list, on stdio as over HTTP
        assert {str(x.uri) for x in (await c.list_resources()).resources} == {"engram://schemas", "engram://identity"}
        me = await c.read_resource("engram://identity")
        assert '"principal": "agent"' in me.contents[0].text  # type: ignore[union-attr]
        assert (await c.list_prompts()).prompts == []


async def test_stdio_uses_engram_context_for_multi_context_keys(tmp_path: Path) -> None:
    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    key, _ = engram.identity.create_key(["acme", "globex"], "agent", ["org/acme"])
    env = dict(os.environ, ENGRAM_DATA_DIR=str(tmp_path), ENGRAM_API_KEY=key, ENGRAM_CONTEXT="globex")
    params = StdioServerParameters(command=sys.executable, args=["-m", "engram.cli", "stdio"], env=env)
    async with Client(stdio_client(params), mode="legacy") as c:
        r = await c.call_tool("current_identity", {})
        assert r.structured_content is not None and r.structured_content["context_id"] == "globex"


def test_stdio_refuses_a_lone_surrogate_naming_the_field_and_stays_up(tmp_path: Path) -> None:
    """Issue #22, class 3, on stdio, as raw JSON-RPC lines (a client library would not send a lone surrogate):
    the SDK's parser dropped such a line unanswered and the client waited for ever; now -32602 names the
    field, nothing is written, and the next call works."""
    import json
    import subprocess

    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    key, _ = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    env = dict(os.environ, ENGRAM_DATA_DIR=str(tmp_path), ENGRAM_API_KEY=key, ENGRAM_EMBEDDER="none")
    proc = subprocess.Popen([sys.executable, "-m", "engram.cli", "stdio"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None

    def send(line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()

    def answer() -> dict[str, Any]:
        assert proc.stdout is not None
        out: dict[str, Any] = json.loads(proc.stdout.readline())
        return out

    try:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        assert answer()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        send('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "context_set", '
             '"arguments": {"key": "k", "value": {"note": "\\ud800"}}}}')  # fmt: skip
        refused = answer()
        assert refused["id"] == 2 and refused["error"]["code"] == -32602
        assert refused["error"]["data"]["field"] == "params.arguments.value.note"
        ok = {"name": "context_set", "arguments": {"key": "k", "value": {"note": "fine"}}}
        send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ok}))
        assert answer()["result"]["structuredContent"]["version"] == 1  # the first write of k: nothing before
    finally:
        proc.stdin.close()
        proc.wait(30)
