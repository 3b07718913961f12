"""Agrama's document (../shared/seeds/agrama-mcp-api.md), replayed: every `tools/call` example it shows is
read from the document itself and sent verbatim. Engram has none of Agrama's tools yet (its
`hybrid_search` takes Vectros' arguments): each is an expected failure naming issue #15, which adds them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client

from tests.conftest import Live
from tests.seeds import coverage
from tests.seeds.replay import refusal

SEED = "agrama"
DOC = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "agrama-mcp-api.md"


def examples() -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) of every JSON-RPC `tools/call` block in the document, in order."""
    calls = []
    for block in re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S):
        try:
            message = json.loads(block)
        except json.JSONDecodeError:
            continue  # response examples with "..." elisions
        if isinstance(message, dict) and message.get("method") == "tools/call":
            calls.append((message["params"]["name"], message["params"].get("arguments", {})))
    return calls


EXAMPLES = examples()
TOOLS = list(dict.fromkeys(name for name, _ in EXAMPLES))
coverage.declare(SEED, TOOLS)


def test_the_document_shows_an_example_of_each_of_its_eleven_tools() -> None:
    assert len(TOOLS) == 11 and "write_code" in TOOLS and "hybrid_search" in TOOLS


async def call(c: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await c.call_tool(tool, args)
    assert not result.is_error, result.structured_content
    return dict(result.structured_content or {})


@pytest.mark.parametrize(("tool", "arguments"), EXAMPLES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXAMPLES)])
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue #15 adds Agrama's workspace tools")
async def test_example_call(live: Live, tool: str, arguments: dict[str, Any]) -> None:
    refused = await refusal(live.url, live.keys.agent, tool, arguments)
    assert refused is None, f"{tool}: {refused}"
    coverage.passed(SEED, tool)
