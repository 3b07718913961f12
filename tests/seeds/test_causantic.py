"""Causantic's document (../shared/seeds/causantic-mcp-tools.md), replayed: each tool with the arguments
its tables name, the plain-text answers checked against the formats its examples and notes give, in a
context of its own (so "nothing found" answers can be checked too). Memories are stored with
`memory_store` (Causantic captures them itself; Engram's agents store them)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from tests.conftest import Live
from tests.functional.mcpclient import connect
from tests.seeds import coverage

SEED = "causantic"
TOOLS = ["recall", "explain", "predict", "list-projects", "list-sessions", "reconstruct"]
coverage.declare(SEED, TOOLS)
CTX = "causantic-seed"
PROJECT = "org/acme/project/my-app"


@pytest.fixture(scope="module")
def key(live: Live) -> str:
    secret, _ = live.engram.identity.create_key([CTX], "agent", ["org/acme"])
    live.engram.identity.register_scopes(CTX, [PROJECT])
    return secret


async def text(c: Client, tool: str, **args: Any) -> str:
    result = await c.call_tool(tool, args)
    assert not result.is_error, result
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent)  # plain text, one block
    return result.content[0].text


async def test_empty_memory_answers(live: Live, key: str) -> None:
    async with connect(live.url, key, extra_headers={"X-Engram-Context": CTX}) as c:
        assert await text(c, "list-projects") == "No projects found in memory."
        assert await text(c, "recall", query="the authentication system") == "No relevant memory found."
        assert await text(c, "explain", topic="why we chose React") == "No relevant memory found."
        assert await text(c, "predict", context="login page") == "No predictions available based on current context."
        assert await text(c, "list-sessions", project="my-app") == 'No sessions found for project "my-app".'


async def test_every_tool_on_stored_sessions(live: Live, key: str) -> None:
    turns = [
        ("a1b2c3d4", "2025-02-06T15:00:00Z", "We chose React for the dashboard because of its component model."),
        ("a1b2c3d4", "2025-02-06T15:20:00Z", "The authentication system uses short-lived JWTs."),
        ("e5f6g7h8", "2025-02-07T10:00:00Z", "Login page errors came from an expired signing key."),
        ("i9j0k1l2", "2025-02-08T14:30:00Z", "We rotated the JWT signing key and added monitoring."),
    ]
    async with connect(live.url, key, extra_headers={"X-Engram-Context": CTX}) as c:
        for session, said, content in turns:
            r = await c.call_tool(
                "memory_store", {"content": content, "session_id": session, "said_at": said, "scopes": [[PROJECT]]}
            )
            assert not r.is_error, r
        projects = await text(c, "list-projects")
        assert projects.splitlines()[0] == "Projects in memory:"
        assert re.fullmatch(r"- org/acme/project/my-app \(4 chunks, Feb 2025\)", projects.splitlines()[1])
        coverage.passed(SEED, "list-projects")

        sessions = await text(c, "list-sessions", project="my-app")
        lines = sessions.splitlines()
        assert lines[0] == 'Sessions for "my-app" (3 total):'
        assert all(
            re.fullmatch(r"- \w+ \(\w{3} \d+, \d+:\d\d [AP]M – \d+:\d\d [AP]M, \d+ chunks, \d+ tokens\)", x)
            for x in lines[1:]
        )
        assert lines[1].startswith("- i9j0k1l2 (Feb 8, 2:30 PM")  # newest first, as the example
        coverage.passed(SEED, "list-sessions")

        found = await text(
            c, "recall", query="How does the authentication system work?", range="long", project="my-app"
        )
        assert re.match(r"Found \d+ relevant memory chunks \(\d+ tokens\):\n\n", found) and "JWT" in found
        coverage.passed(SEED, "recall")
        why = await text(c, "explain", topic="why we chose React")
        assert why.startswith("Found ") and "component model" in why
        coverage.passed(SEED, "explain")
        pred = await text(c, "predict", context="the login page shows signing errors", project="my-app")
        assert re.match(r"Potentially relevant context \(\d+ items\):", pred) and "signing key" in pred
        coverage.passed(SEED, "predict")

        rebuilt = await text(c, "reconstruct", project="my-app")
        assert rebuilt.index("a1b2c3d4") < rebuilt.index("e5f6g7h8") < rebuilt.index("i9j0k1l2")  # chronological
        prev = await text(c, "reconstruct", project="my-app", previous_session=True, current_session_id="i9j0k1l2")
        assert "e5f6g7h8" in prev and "i9j0k1l2" not in prev
        assert (await text(c, "reconstruct", project="my-app", previous_session=True)).startswith("Error: ")
        coverage.passed(SEED, "reconstruct")

        with pytest.raises(MCPError) as failed:  # "Tool errors ... code -32002 ... include the tool name"
            await c.call_tool("explain", {"topic": "   "})
        assert failed.value.error.code == -32002 and failed.value.error.message.startswith("explain: ")
