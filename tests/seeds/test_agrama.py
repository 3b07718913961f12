"""Agrama's document (../shared/seeds/agrama-mcp-api.md), replayed: every `tools/call` example it shows is
read from the document itself and sent verbatim. Engram has none of Agrama's tools yet (its
`hybrid_search` takes Vectros' arguments): each is an expected failure naming issue #15, which adds them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Live
from tests.seeds import coverage
from tests.seeds.replay import refusal

SEED = "agrama"
DOC = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "agrama-mcp-api.md"
# Every JSON-RPC `tools/call` block of the document, in order, as it writes them (copied here so the suite
# runs where the document is not beside the repository; `test_the_calls_are_the_documents` compares).
EXAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "read_code",
        {
            "path": "src/database.zig",
            "include_history": False,
            "history_limit": 5,
            "include_semantic_context": True,
            "include_dependencies": True,
            "include_collaborative_context": False,
            "dependency_depth": 2,
            "semantic_similarity_threshold": 0.7,
        },
    ),
    (
        "write_code",
        {
            "path": "src/new_feature.zig",
            "content": 'const std = @import("std");\n\npub const NewFeature = struct {\n    // Implementation\n};',
            "reason": "Add new feature implementation",
            "agent_id": "claude-code-assistant",
            "create_backup": True,
            "validate_syntax": True,
            "update_dependencies": True,
            "collaborative_mode": False,
        },
    ),
    (
        "hybrid_search",
        {
            "query": "memory allocation patterns",
            "context_files": ["src/memory_pools.zig"],
            "max_results": 10,
            "include_semantic": True,
            "include_graph": True,
            "semantic_weight": 0.4,
            "lexical_weight": 0.4,
            "graph_weight": 0.2,
        },
    ),
    (
        "semantic_search",
        {
            "query": "database connection handling",
            "embedding_model": "matryoshka",
            "embedding_dimension": 1024,
            "max_results": 5,
            "similarity_threshold": 0.8,
        },
    ),
    (
        "analyze_dependencies",
        {
            "file_path": "src/database.zig",
            "max_depth": 3,
            "direction": "bidirectional",
            "include_impact_analysis": True,
        },
    ),
    (
        "get_context",
        {
            "context_types": ["project", "recent_changes", "performance"],
            "time_range": "24h",
            "include_metrics": True,
            "include_active_sessions": True,
        },
    ),
    (
        "record_decision",
        {
            "decision": "Implement memory pool optimization",
            "reasoning": "Analysis shows 70% allocation overhead reduction potential",
            "context": {
                "files_analyzed": ["src/memory_pools.zig", "src/database.zig"],
                "performance_metrics": {"current_allocations": 1000, "target": 300},
            },
            "confidence": 0.9,
            "alternatives": ["Custom allocator", "Arena allocator only"],
            "impact": "high",
        },
    ),
    (
        "query_history",
        {
            "entity_id": "src/database.zig",
            "time_range": {"start": "2024-01-01T00:00:00Z", "end": "2024-01-15T23:59:59Z"},
            "change_types": ["update", "create"],
            "include_diff": True,
            "max_results": 20,
        },
    ),
    (
        "create_session",
        {
            "session_name": "database-refactoring",
            "participants": ["claude-code", "cursor-agent", "custom-reviewer"],
            "document_paths": ["src/database.zig", "src/memory_pools.zig"],
            "session_type": "editing",
            "enable_real_time": True,
        },
    ),
    (
        "sync_document",
        {
            "document_id": "src/database.zig",
            "operations": [
                {
                    "type": "insert",
                    "position": 150,
                    "content": "// New comment",
                    "vector_clock": {"agent_1": 5, "agent_2": 3},
                }
            ],
            "vector_clock": {"agent_1": 5, "agent_2": 3},
            "agent_id": "claude-code",
        },
    ),
    (
        "get_performance_metrics",
        {
            "metric_types": ["latency", "throughput", "memory", "health"],
            "time_window": "1h",
            "include_percentiles": True,
            "include_system_metrics": False,
        },
    ),
]


def from_document() -> list[tuple[str, dict[str, Any]]]:
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


TOOLS = list(dict.fromkeys(name for name, _ in EXAMPLES))
coverage.declare(SEED, TOOLS)


def test_the_calls_are_the_documents() -> None:
    assert len(TOOLS) == 11 and "write_code" in TOOLS and "hybrid_search" in TOOLS
    if DOC.exists():  # beside the repository here and in this workplace's CI; not on GitHub's runners
        assert from_document() == EXAMPLES


@pytest.mark.parametrize(("tool", "arguments"), EXAMPLES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXAMPLES)])
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue #15 adds Agrama's workspace tools")
async def test_example_call(live: Live, tool: str, arguments: dict[str, Any]) -> None:
    refused = await refusal(live.url, live.keys.agent, tool, arguments)
    assert refused is None, f"{tool}: {refused}"
    coverage.passed(SEED, tool)
