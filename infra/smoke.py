"""MCP smoke test of a running Engram, with the official MCP client: `python infra/smoke.py MCP_URL`.

The key comes from ENGRAM_SMOKE_KEY (a key of the context it writes to). It initializes, lists the
tools, stores a fact with a unique marker, recalls it, and exits 1 on the first thing that is wrong. It
prints how long the first and the second `memory_recall` took (right after a deploy the first one meets a
freshly restored SnapStart environment: that is the cold request's latency as a client sees it).
The deploy workflow runs it against staging and prod; a test runs it against a local server.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

EXPECTED = {"memory_store", "memory_recall", "knowledge_search", "document_upload", "rag_ask", "current_identity"}


async def smoke(url: str, key: str) -> list[str]:
    done: list[str] = []
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None) as client,
    ):
        tools = {t.name for t in (await client.list_tools()).tools}
        missing = EXPECTED - tools
        if missing:
            raise AssertionError(f"tools/list lacks {sorted(missing)}")
        done.append(f"tools/list: {len(tools)} tools")
        marker = f"smoke-{uuid.uuid4().hex[:10]}"

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, arguments)
            if result.is_error or not isinstance(result.structured_content, dict):
                raise AssertionError(f"{name} failed: {result.content}")
            return result.structured_content

        me = await call("current_identity", {})
        done.append(f"current_identity: {me['principal']} in {me['context_id']}")
        stored = await call("memory_store", {"content": f"My smoke test marker is {marker}."})
        done.append(f"memory_store: turn {stored['turn_id']}")
        timings = []
        for _ in range(2):
            started = time.perf_counter()
            recalled = await call("memory_recall", {"query": f"smoke test marker {marker}"})
            timings.append((time.perf_counter() - started) * 1000)
        if not any(marker in str(r.get("text", "")) for r in recalled["results"]):
            raise AssertionError(f"memory_recall did not find {marker}: {recalled['results'][:3]}")
        done.append("memory_recall: found the marker")
        done.append(f"memory_recall latency: first {timings[0]:.0f} ms, second {timings[1]:.0f} ms")
    return done


def main() -> int:
    if len(sys.argv) != 2 or not os.environ.get("ENGRAM_SMOKE_KEY"):
        print("usage: ENGRAM_SMOKE_KEY=sk-... python infra/smoke.py https://.../mcp", file=sys.stderr)
        return 2
    try:
        for line in asyncio.run(smoke(sys.argv[1], os.environ["ENGRAM_SMOKE_KEY"])):
            print("ok", line)
    except Exception as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
