"""Spectron's document (../shared/seeds/spectron-mcp-tools.txt), replayed: each example call as the seed
writes it, through an MCP client configured as the seed's own config (`X-Spectron-Context: acme-prod`),
checked against the fields, types and defaults the document shows. Placeholders the document leaves
(`<RFC 4648 bytes>`, `document:0197...`) are the only values filled in."""

from __future__ import annotations

import base64
from typing import Any

import anyio
import pytest
from mcp.client import Client

from tests.conftest import Live
from tests.fixtures.files import RETURNS_PDF, make_pdf
from tests.functional.mcpclient import connect
from tests.seeds import coverage

SEED = "spectron"
TOOLS = [
    "memory_store",
    "memory_recall",
    "memory_reflect",
    "memory_profile",
    "knowledge_search",
    "knowledge_get",
    "document_upload",
    "memory_forget",
]
coverage.declare(SEED, TOOLS)

COFFEE_PDF = [
    ["Kitchen rules", "The coffee machine on the second floor is descaled every Friday afternoon."],
    ["Fridge", "Label your lunch with your name; the fridge is emptied at six on Thursdays."],
]
STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def key(live: Live) -> str:
    """A key for the seed's context, able to do every example (reflect with persist needs management)."""
    ident = live.engram.identity
    secret, _ = ident.create_key(["acme-prod"], "management", ["org/acme", "project/support"])
    ident.register_scopes("acme-prod", ["org/acme/user/alice", "org/acme/team/eng", "project/support"])
    return secret


def client(live: Live, key: str) -> Any:
    return connect(live.url, key, extra_headers={"X-Spectron-Context": "acme-prod"})


async def call(c: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await c.call_tool(tool, args)
    assert not result.is_error, result.structured_content
    assert result.structured_content is not None
    return dict(result.structured_content)


def trace(out: dict[str, Any]) -> None:
    assert isinstance(out["traceId"], str) and out["traceId"]


async def test_memory_store(live: Live, key: str) -> None:
    async with client(live, key) as c:
        out = await call(
            c,
            "memory_store",
            {
                "content": "I just got promoted to CTO.",
                "role": "user",
                "session_id": "sess_abc123",
                "scopes": [["org/acme/user/alice"]],
            },
        )
    assert out["turn_id"].startswith("turn:")
    assert out["entities"][0]["id"] == ["Person", "alice"] and out["entities"][0]["action"] in ("created", "updated")
    assert {"key": "role", "value": "CTO"}.items() <= out["attributes"][0].items()
    for field in ("relations", "instructions", "uncertainties", "corrections"):
        assert isinstance(out[field], list)
    trace(out)
    coverage.passed(SEED, "memory_store")


async def test_memory_recall(live: Live, key: str) -> None:
    async with client(live, key) as c:
        out = await call(c, "memory_recall", {"query": "What does Alice do at Acme?", "k": 10, "lens": [["org/acme"]]})
    assert "CTO" in out["context"] and out["tier"] in ("direct", "cache", "hybrid", "full_context")
    assert isinstance(out["queryMs"], int | float)
    trace(out)
    coverage.passed(SEED, "memory_recall")


async def test_memory_reflect(live: Live, key: str) -> None:
    async with client(live, key) as c:
        out = await call(
            c,
            "memory_reflect",
            {
                "query": "What recurring complaints have customers raised this month?",
                "persist": True,
                "lens": [["org/acme"], ["project/support"]],
            },
        )
    assert isinstance(out["reflection"], str) and out["reflection"]
    assert isinstance(out["evidence"], list) and isinstance(out["persisted_attributes"], list)
    trace(out)
    coverage.passed(SEED, "memory_reflect")


async def test_memory_profile(live: Live, key: str) -> None:
    async with client(live, key) as c:
        await call(
            c,
            "memory_store",
            {"content": "I'm currently leading the Q3 roadmap review.", "scopes": [["org/acme/user/alice"]]},
        )
        out = await call(c, "memory_profile", {"scopes": [["org/acme/user/alice"]]})
    assert set(out) >= {"static", "dynamic", "preferences", "instructions"}
    assert {"key": "role", "value": "CTO"}.items() <= next(s for s in out["static"] if s["key"] == "role").items()
    assert {"key": "current_task", "value": "Q3 roadmap review"}.items() <= out["dynamic"][0].items()
    coverage.passed(SEED, "memory_profile")


async def test_document_upload(live: Live, key: str) -> None:
    async with client(live, key) as c:
        out = await call(
            c,
            "document_upload",
            {
                "context_id": "acme-prod",
                "bytes_base64": base64.b64encode(make_pdf(RETURNS_PDF)).decode(),
                "title": "Returns Policy",
                "source": "returns.pdf",
                "mime_type": "application/pdf",
                "filename": "returns.pdf",
                "scopes": [["org/acme/team/eng"]],
                "labels": ["team=eng"],
            },
        )
    assert out["id"].startswith("doc:") and out["status"] == "queued" and out["deduplicated"] is False
    assert out["content_hash"].startswith("blake3:") and out["version"] == 1
    STATE["doc"] = out["id"]
    live.engram.queue.join(30)
    coverage.passed(SEED, "document_upload")


async def indexed(c: Client, doc_id: str) -> None:
    """Wait until the document's vectors are in (its background indexing is done)."""
    for _ in range(200):
        if (await call(c, "knowledge_get", {"kind": "document", "id": doc_id}))["status"] == "indexed":
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"{doc_id} not indexed")


async def test_knowledge_search(live: Live, key: str) -> None:
    async with client(live, key) as c:
        # a bad hit to drop: another PDF the filter lets through, about something else
        other = await call(
            c,
            "document_upload",
            {
                "bytes_base64": base64.b64encode(make_pdf(COFFEE_PDF)).decode(),
                "title": "Kitchen rules",
                "source": "kitchen.pdf",
                "mime_type": "application/pdf",
            },
        )
        for doc_id in (STATE["doc"], other["id"]):
            await indexed(c, doc_id)
        example = {
            "query": "What is the return window for unopened items?",
            "mode": "hybrid",
            "k": 5,
            "threshold": 0.5,
            "filter": {"mime_type": ["application/pdf"]},
        }
        out = await call(c, "knowledge_search", example)
        unfiltered = await call(c, "knowledge_search", {k: v for k, v in example.items() if k != "threshold"})
    top = out["results"][0]
    assert "30 days" in top["chunk"]["text"] and {"id", "text", "section", "position"} <= set(top["chunk"])
    assert 0.5 <= top["score"] <= 1 and {"id", "title", "source"} <= set(top["document"])
    assert top["document"]["title"] == "Returns Policy" and top["document"]["source"] == "returns.pdf"
    assert all(r["document"]["title"] == "Returns Policy" for r in out["results"])  # the good hits only
    assert isinstance(out["queryMs"], int | float)
    trace(out)
    # without the threshold the kitchen rules come too, scored below it: the threshold is what dropped them
    scores = [r["score"] for r in unfiltered["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    dropped = [r for r in unfiltered["results"] if r["document"]["title"] == "Kitchen rules"]
    assert dropped and all(r["score"] < 0.5 for r in dropped)
    coverage.passed(SEED, "knowledge_search")


async def test_knowledge_get(live: Live, key: str) -> None:
    async with client(live, key) as c:
        doc = await call(c, "knowledge_get", {"kind": "document", "id": STATE["doc"]})
        assert doc["id"] == STATE["doc"] and doc["status"] in ("queued", "indexed") and doc["title"] == "Returns Policy"
        chunks = await call(c, "knowledge_get", {"kind": "chunk", "id": STATE["doc"]})  # a paginated chunk list
        assert chunks["chunks"] and any("30 days" in x["text"] for x in chunks["chunks"])
        node = await call(c, "knowledge_get", {"kind": "node", "node": {"kind": "Person", "slug": "alice"}})
        assert node["node"]["type"] == "Person" and isinstance(node["edges"], list)
        missing = await c.call_tool(
            "knowledge_get", {"kind": "node", "node": {"kind": "product", "slug": "airpods_pro_2"}}
        )
    # the seed's error shape: an isError result carrying the REST status, not a JSON-RPC error
    assert missing.is_error and missing.structured_content is not None
    assert missing.structured_content["error"]["status"] == 404 and missing.structured_content["error"]["message"]
    coverage.passed(SEED, "knowledge_get")


async def test_memory_forget(live: Live, key: str) -> None:
    async with client(live, key) as c:
        out = await call(
            c,
            "memory_forget",
            {"query": "anything about my previous role at the old company", "scopes": [["org/acme/user/alice"]]},
        )
    assert isinstance(out["deleted"], int) and out["deleted"] >= 0
    trace(out)
    coverage.passed(SEED, "memory_forget")
