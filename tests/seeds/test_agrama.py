"""Agrama's document (../shared/seeds/agrama-mcp-api.md), replayed: every `tools/call` example it shows is
read from the document itself and sent verbatim, in its order, over HTTP, on a workspace that holds the
files the examples name; each answer is checked against the document's response fields."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.conftest import Live
from tests.functional.mcpclient import connect
from tests.seeds import coverage

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


DATABASE = """const std = @import("std");
const pools = @import("memory_pools.zig");

/// A database handle: connection pooling and query execution.
pub const Database = struct {
    allocator: std.mem.Allocator,
    connections: u32,

    pub fn init(allocator: std.mem.Allocator) Database {
        return Database{ .allocator = allocator, .connections = 0 };
    }
};
"""
POOLS = """const std = @import("std");

/// Memory pools: fixed-size allocation patterns for hot paths.
pub const MemoryPool = struct {
    block_size: usize,
    free_blocks: usize,
};
"""


async def test_every_example_in_the_documents_order(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        for path, text in (("src/memory_pools.zig", POOLS), ("src/database.zig", DATABASE)):
            await c.call_tool("write_code", {"path": path, "content": text, "reason": "seed workspace"})
        answers: dict[str, dict[str, Any]] = {}
        for tool, arguments in EXAMPLES:
            result = await c.call_tool(tool, arguments)
            assert not result.is_error and result.structured_content is not None, (tool, result)
            answer = dict(result.structured_content)
            assert json.loads(result.content[0].text) == answer  # type: ignore[union-attr]  # text: the JSON
            answers[tool] = answer
            coverage.passed(SEED, tool)
    read = answers["read_code"]
    assert read["exists"] is True and read["content"] == DATABASE
    assert set(read["semantic_context"]) >= {"embedding_available", "similarity_threshold", "similar_files"}
    deps = read["dependency_context"]
    assert "src/memory_pools.zig" in deps["dependencies"] and "std" in deps["dependencies"]
    assert deps["immediate_dependencies"] == 2 and 0 <= deps["graph_centrality"] <= 1
    wrote = answers["write_code"]
    assert wrote["success"] and wrote["syntax_valid"] and wrote["provenance"]["agent_id"] == "claude-code-assistant"
    assert wrote["impact_analysis"]["dependency_changes"] in (["added: std"], [])
    found = answers["hybrid_search"]
    assert found["query"] == "memory allocation patterns" and found["results"]
    top = {r["path"]: r for r in found["results"]}["src/memory_pools.zig"]
    assert top["graph_distance"] == 0 and top["graph_score"] == 1.0 and "memory" in top["matching_terms"]
    assert set(top) >= {"combined_score", "bm25_score", "semantic_score", "semantic_similarity"}
    assert found["results"][0]["path"] == "src/memory_pools.zig"
    assert isinstance(answers["semantic_search"]["results"], list)
    analyzed = answers["analyze_dependencies"]
    assert {"path": "src/memory_pools.zig", "depth": 1} in analyzed["dependencies"]
    assert analyzed["impact_analysis"]["files_affected"] >= 0
    ctx = answers["get_context"]
    assert ctx["project"]["files"] >= 3 and ctx["recent_changes"] and "latency" in ctx["performance"]
    assert answers["record_decision"]["decision_id"].startswith("dec_")
    history = answers["query_history"]
    assert history["entity_type"] == "file" and history["history"] == []  # nothing was written in January 2024
    session = answers["create_session"]
    assert session["session_id"] and session["document_paths"] == ["src/database.zig", "src/memory_pools.zig"]
    synced = answers["sync_document"]
    assert synced["success"] and "// New comment" in synced["content"] and "claude-code" in synced["contributors"]
    assert synced["session_id"] == session["session_id"]  # the document's open session
    async with connect(live.url, live.keys.agent) as c:  # the decision is searchable
        args = {"query": "memory pool optimization to cut allocation overhead", "similarity_threshold": 0.3}
        searched = (await c.call_tool("semantic_search", args)).structured_content
    assert searched is not None
    assert answers["record_decision"]["decision_id"] in [d["decision_id"] for d in searched["decisions"]]
    metrics = answers["get_performance_metrics"]
    assert metrics["latency"]["p50"] > 0 and metrics["throughput"]["total_requests"] >= len(EXAMPLES)
    assert metrics["memory"]["peak_usage_mb"] > 0 and metrics["health"]["status"] in ("healthy", "degraded")
