"""Vectros' document (../shared/seeds/vectros-mcp-server.md), replayed: what it says of each tool Engram
has (the MCP caps, dual-mode ingest, idempotency by externalId, PENDING_INDEX -> INDEXED, asks with
progress), over HTTP; the tools and the two resources Engram lacks are expected failures naming issue #14."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from tests.conftest import Live
from tests.functional.mcpclient import connect
from tests.seeds import coverage
from tests.seeds.replay import refusal

SEED = "vectros"
PRESENT = [
    "hybrid_search",
    "current_identity",
    "document_ingest",
    "document_get",
    "document_update",
    "document_delete",
    "document_query",
    "document_ask",
    "folder_create",
    "folder_update",
    "folder_delete",
    "folder_query",
    "rag_ask",
]
MISSING = {
    "list_schemas": {},
    "lookup_principal": {"externalId": "user-123"},
    "record_create": {"type": "ticket", "payload": {"title": "Printer jam"}, "externalId": "t-1"},
    "record_get": {"id": "rec_1"},
    "record_update": {"id": "rec_1", "payload": {"title": "Printer fixed"}},
    "record_delete": {"id": "rec_1"},
    "record_query": {"type": "ticket"},
    "version_history": {"id": "rec_1"},
}
coverage.declare(SEED, PRESENT + list(MISSING))
TAG = uuid.uuid4().hex[:8]


async def ok(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await c.call_tool(tool, args)
    assert not result.is_error, result.structured_content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def test_documents_folders_search_and_asks(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        me = await ok(c, "current_identity")
        assert me["principal"] == "agent" and me["context_id"] == "acme"
        coverage.passed(SEED, "current_identity")

        folder = await ok(c, "folder_create", name=f"manuals-{TAG}")
        moved = await ok(c, "folder_update", id=folder["id"], description="Maintenance manuals")
        assert moved["description"] == "Maintenance manuals" and moved["version"] == 2
        assert any(f["id"] == folder["id"] for f in (await ok(c, "folder_query", prefix=f"manuals-{TAG}"))["items"])
        coverage.passed(SEED, "folder_create")
        coverage.passed(SEED, "folder_update")
        coverage.passed(SEED, "folder_query")

        # "Pass `text` ... or `filePath` ... exactly one; both is an error"; filePath is stdio-only
        both: MCPError | None = None
        try:
            await c.call_tool("document_ingest", {"text": "x", "filePath": "notes.txt"})
        except MCPError as exc:  # refused at validation, as the document says
            both = exc
        assert both is not None and both.error.code == -32602 and "exactly one" in both.error.message
        http_file = await c.call_tool("document_ingest", {"filePath": "notes.txt"})
        assert http_file.is_error and http_file.structured_content["error"]["code"] == "file_path_http"  # type: ignore[index]
        texts = [f"{TAG} pitot probe heater check {i}: inspect the probe heater and the cover." for i in range(12)]
        docs = [
            await ok(c, "document_ingest", text=t, title=f"{TAG}-{i}", folderId=folder["id"])
            for i, t in enumerate(texts)
        ]
        assert docs[0]["indexStatus"] in ("PENDING_INDEX", "INDEXED")
        again = await ok(c, "document_ingest", text="a retried ingest", externalId=f"ext-{TAG}")
        retried = await ok(c, "document_ingest", text="a retried ingest", externalId=f"ext-{TAG}")
        assert retried["id"] == again["id"]  # "re-ingesting the same one returns the existing document"
        coverage.passed(SEED, "document_ingest")

        for _ in range(200):  # "poll document_get until it reports INDEXED"
            got = await ok(c, "document_get", id=docs[-1]["id"], includeText=True)
            if got["indexStatus"] == "INDEXED":
                break
            await asyncio.sleep(0.05)
        assert got["indexStatus"] == "INDEXED" and "probe heater" in got["text"]
        coverage.passed(SEED, "document_get")

        three = await ok(c, "hybrid_search", query=f"{TAG} probe heater")  # MCP default 3
        assert len(three["results"]) == 3
        refused: str | None = None
        try:
            await c.call_tool("hybrid_search", {"query": "probe", "limit": 11})  # MCP max 10
        except MCPError as exc:
            refused = exc.error.message
        assert refused is not None and "limit" in refused
        page2 = await ok(c, "hybrid_search", query=f"{TAG} probe heater", limit=3, offset=3)
        assert {r["chunk_id"] for r in page2["results"]}.isdisjoint({r["chunk_id"] for r in three["results"]})
        coverage.passed(SEED, "hybrid_search")

        steps: list[float] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            steps.append(done)

        answer = await c.call_tool(
            "rag_ask", {"question": f"What should be inspected on the probe ({TAG})?"}, progress_callback=progress
        )
        assert not answer.is_error and answer.structured_content is not None
        assert answer.structured_content["citations"] and steps  # progress notifications while it works
        coverage.passed(SEED, "rag_ask")
        one = await ok(c, "document_ask", id=docs[0]["id"], question="What is inspected?")
        assert one["citations"] and all(x["document_id"] == docs[0]["id"] for x in one["citations"])
        coverage.passed(SEED, "document_ask")

        updated = await ok(
            c, "document_update", id=docs[0]["id"], title=f"{TAG}-renamed", expectedVersion=docs[0]["version"]
        )
        assert updated["title"] == f"{TAG}-renamed" and updated["version"] == docs[0]["version"] + 1
        coverage.passed(SEED, "document_update")
        listed = await ok(c, "document_query", field="title", op="prefix", value=f"{TAG}-", limit=20)
        assert len(listed["items"]) == 12
        coverage.passed(SEED, "document_query")
        for d in docs:
            assert (await ok(c, "document_delete", id=d["id"]))["deleted"] is True
        assert (await c.call_tool("document_get", {"id": docs[0]["id"]})).is_error  # deleted: gone from reads
        coverage.passed(SEED, "document_delete")
        assert (await ok(c, "folder_delete", id=folder["id"]))["deleted"] is True
        coverage.passed(SEED, "folder_delete")


@pytest.mark.parametrize("tool", list(MISSING))
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="issue #14 adds Vectros' records, schemas and principals")
async def test_tools_issue_14_adds(live: Live, tool: str) -> None:
    refused = await refusal(live.url, live.keys.agent, tool, MISSING[tool])
    assert refused is None, f"{tool}: {refused}"
    coverage.passed(SEED, tool)


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="issue #14 adds the schema catalog and identity resources"
)
async def test_the_two_resources(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        resources = (await c.list_resources()).resources
    assert len(resources) == 2, "the schema catalog and identity resources"
