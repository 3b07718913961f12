"""`engram stdio` driven by the SDK's stdio client."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
