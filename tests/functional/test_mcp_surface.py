"""The MCP surface a client expects besides tools: resources, resource templates and prompts answer
(empty for now), and logging/setLevel makes the server send log notifications at or above the level."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Live
from tests.functional.mcpclient import connect


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_resources_templates_and_prompts_answer(live: Live, mode: str) -> None:
    async with connect(live.url, live.keys.agent, mode=mode) as c:
        resources = (await c.list_resources()).resources
        assert {str(r.uri) for r in resources} == {"engram://schemas", "engram://identity"}
        me = await c.read_resource("engram://identity")
        assert '"context_id": "acme"' in me.contents[0].text  # type: ignore[union-attr]
        assert (await c.list_resource_templates()).resource_templates == []
        assert (await c.list_prompts()).prompts == []
        unknown: MCPError | None = None
        try:
            await c.read_resource("engram://nothing")
        except MCPError as exc:
            unknown = exc
        # -32002 before the 2026-07-28 revision; since, -32602 naming the uri (SEP-2164)
        assert unknown is not None and unknown.error.code == (-32002 if mode == "legacy" else -32602)
    async with connect(live.url, live.keys.agent, mode=mode, path="/mcp/memory") as family:  # on every endpoint
        assert len((await family.list_resources()).resources) == 2
        catalog = await family.read_resource("engram://schemas")
        assert '"schemas"' in catalog.contents[0].text  # type: ignore[union-attr]


async def test_logging_set_level_then_log_notifications_at_or_above_it(live: Live) -> None:
    got: list[Any] = []

    async def on_log(params: Any) -> None:
        got.append(params)

    # a key of its own: the level a key sets holds for its later calls
    key, _ = live.engram.identity.create_key(["acme"], "agent", ["org/acme"])
    async with connect(live.url, key, logging_callback=on_log) as c:
        assert (await c.list_tools()).tools  # nothing is logged before a level is set
        await c.call_tool("memory_recall", {"query": "anything at all"})
        assert got == []
        await c.set_logging_level("info")
        await c.call_tool("memory_recall", {"query": "anything at all"})
        assert [(m.level, m.logger, m.data["tool"]) for m in got] == [("info", "engram", "memory_recall")]
        assert isinstance(got[0].data["ms"], float)
        got.clear()
        await c.set_logging_level("warning")  # info is below it now; a failing call is a warning
        await c.call_tool("memory_recall", {"query": "anything at all"})
        bad = await c.call_tool("document_get", {"id": "doc:nope"})
        assert bad.is_error
        assert [(m.level, m.data["tool"], m.data["error"]["status"]) for m in got] == [("warning", "document_get", 404)]
