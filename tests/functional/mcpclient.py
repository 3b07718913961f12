"""A real MCP client (the SDK's) over real HTTP, with a bearer key."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


@contextlib.asynccontextmanager
async def connect(url: str, key: str | None, mode: str = "legacy", path: str = "/mcp") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(url + path, http_client=http), mode=mode, cache=None) as client,
    ):
        yield client


async def call(client: Client, tool: str, **args: Any) -> Any:
    result = await client.call_tool(tool, args)
    return result
