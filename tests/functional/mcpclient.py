"""A real MCP client (the SDK's) over real HTTP, with a bearer key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


@contextlib.asynccontextmanager
async def connect(
    url: str,
    key: str | None,
    mode: str = "legacy",
    path: str = "/mcp",
    extra_headers: dict[str, str] | None = None,
    **options: Any,
) -> AsyncIterator[Client]:
    headers = ({"Authorization": f"Bearer {key}"} if key else {}) | (extra_headers or {})
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url + path, http_client=http), mode=mode, cache=None, **options) as client,
    ):
        yield client


def post_tool_call(url: str, key: str, tool: str, arguments: dict[str, Any]) -> httpx.Response:
    """One raw JSON-RPC tools/call POST, for what a client library would refuse to send."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    return httpx.post(url + "/mcp", json=body, headers=headers)
