"""Observability is per tenant (issue #22, class 5): `get_performance_metrics` and `get_context` (errors) showed
another tenant's tool names, counts, latencies and failures. Over real HTTP with the MCP client: a context sees
only its own calls, and within it an agent only the calls of keys whose scopes it may see."""

from __future__ import annotations

import uuid
from typing import Any

from tests.conftest import Live
from tests.functional.mcpclient import connect


async def _calls(live: Live, key: str, tool: str, arguments: dict[str, Any], times: int = 1) -> None:
    async with connect(live.url, key) as c:
        for _ in range(times):
            await c.call_tool(tool, arguments)


async def _seen(live: Live, key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    async with connect(live.url, key) as c:
        metrics = (await c.call_tool("get_performance_metrics", {"time_window": "1h"})).structured_content
        context = await c.call_tool("get_context", {"context_types": ["errors"], "time_range": "1h"})
    assert metrics is not None and context.structured_content is not None
    return metrics["latency"]["by_tool"], context.structured_content["errors"]


async def test_metrics_and_errors_show_only_what_the_caller_may_see(live: Live) -> None:
    tag = uuid.uuid4().hex[:8]
    ours, theirs = f"obs-{tag}", f"other-{tag}"
    ident = live.engram.identity
    alice, _ = ident.create_key([ours], "agent", [f"org/{tag}/user/alice"])
    bob, _ = ident.create_key([ours], "agent", [f"org/{tag}/user/bob"])
    manager, _ = ident.create_key([ours], "management", [f"org/{tag}"])
    intruder, _ = ident.create_key([theirs], "management", [f"org/{theirs}"])
    # another tenant's distinctive tools and failures
    await _calls(live, intruder, "folder_query", {}, times=3)
    await _calls(live, intruder, "record_get", {"id": "rec_nothing"})  # not_found
    # Bob's own, in the same context
    await _calls(live, bob, "context_list", {}, times=2)
    await _calls(live, bob, "context_get", {"key": "missing"})  # not_found
    await _calls(live, alice, "list_schemas", {})

    tools, errors = await _seen(live, alice)
    assert "folder_query" not in tools and "record_get" not in tools  # the other tenant's
    assert "context_list" not in tools and "context_get" not in tools  # Bob's, whose scope she cannot see
    assert tools["list_schemas"]["count"] == 1
    assert errors == []

    tools, errors = await _seen(live, manager)  # sees the whole context, never the other tenant
    assert tools["context_list"]["count"] == 2 and tools["list_schemas"]["count"] == 1
    assert "folder_query" not in tools and "record_get" not in tools
    assert [(e["tool"], e["code"]) for e in errors] == [("context_get", "not_found")]

    tools, errors = await _seen(live, intruder)
    assert tools["folder_query"]["count"] == 3 and "context_list" not in tools
    assert [(e["tool"], e["code"]) for e in errors] == [("record_get", "not_found")]
