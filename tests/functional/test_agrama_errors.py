"""Bad input to Agrama's tools over HTTP, answered in Agrama's error format (a JSON-RPC error: -32602 bad
arguments, -32003 refused input, -32002 no such file, `data` with details, tool, timestamp), nothing written,
the server up; and `hybrid_search` refusing a call that mixes Agrama's and Vectros' arguments."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Live
from tests.functional.mcpclient import connect

CASES: list[tuple[str, dict[str, Any], int, str]] = [
    ("read_code", {}, -32602, "path"),
    ("read_code", {"path": "../etc/passwd"}, -32003, "leaves the workspace"),
    ("read_code", {"path": "/etc/passwd"}, -32003, "absolute"),
    ("read_code", {"path": "a\u0000b.py"}, -32003, "control character"),
    ("write_code", {"path": "x.py", "content": "def f(:\n", "reason": "r"}, -32003, "syntax error at line 1"),
    ("write_code", {"path": "x.py", "content": "x = 1\n"}, -32602, "reason"),
    ("analyze_dependencies", {"file_path": "nowhere/none.py"}, -32002, "no file"),
    ("query_history", {"entity_id": "nowhere/none.py"}, -32002, "no file"),
    ("query_history", {"entity_id": "dec_NOTHING"}, -32002, "no decision"),
    ("get_context", {"time_range": "forever"}, -32602, "time_range"),
    ("get_context", {"context_types": ["gossip"]}, -32602, "context_types"),
    ("sync_document", {"document_id": "x.py", "agent_id": "a", "operations": [{"type": "paste", "position": 0}]},
     -32602, "type"),
    ("sync_document", {"document_id": "x.py", "agent_id": "a", "operations": []}, -32602, "operations"),
    ("record_decision", {"decision": "d", "reasoning": "r", "confidence": 2}, -32602, "confidence"),
    ("semantic_search", {"query": "q", "embedding_dimension": 9000}, -32602, "embedding_dimension"),
    ("get_performance_metrics", {"metric_types": ["cpu_temperature"]}, -32602, "metric_types"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "arguments", "code", "words"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
async def test_bad_input_in_agramas_error_format(live: Live, tool: str, arguments: dict[str, Any], code: int,
                                                 words: str) -> None:  # fmt: skip
    before = len(live.engram.records.query("acme", "wfile", limit=10_000).items)
    async with connect(live.url, live.keys.agent) as c:
        with pytest.raises(MCPError) as info:
            await c.call_tool(tool, arguments)
        assert info.value.error.code == code, info.value.error
        assert words in info.value.error.message, info.value.error.message
        if code != -32602:  # a tool's own refusal carries Agrama's data fields
            data = info.value.error.data
            assert data["tool"] == tool and data["details"] and data["timestamp"].endswith("Z")
        assert (await c.call_tool("get_performance_metrics", {})).structured_content  # the server is up
    assert len(live.engram.records.query("acme", "wfile", limit=10_000).items) == before  # nothing written


async def test_hybrid_search_refuses_a_call_that_mixes_the_two_seeds(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        with pytest.raises(MCPError) as info:
            await c.call_tool("hybrid_search", {"query": "pool", "max_results": 5, "folderId": "f1"})
    message = info.value.error.message
    assert info.value.error.code == -32602
    assert "Agrama's arguments (max_results" in message and "Vectros' (folderId" in message
