"""Vectros' document (../shared/seeds/vectros-mcp-server.md), replayed: what it says of each tool Engram
has (the MCP caps, dual-mode ingest, idempotency by externalId, PENDING_INDEX -> INDEXED, asks with
progress, records, schemas, principals, version history, the two read-only resources and the tool filter
that fails fast), over HTTP, every one of the 21 tools."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from tests.conftest import Live
from tests.functional.mcpclient import connect
from tests.seeds import coverage

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
    "list_schemas",
    "lookup_principal",
    "record_create",
    "record_get",
    "record_update",
    "record_delete",
    "record_query",
    "version_history",
]
coverage.declare(SEED, PRESENT)
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


TICKET = {
    "type": f"ticket{TAG}",
    "jsonSchema": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["title", "priority"],
    },
    "lookupFields": [{"field": "title", "ops": ["exact", "prefix"]}, {"field": "priority", "ops": ["exact", "range"]}],
    "indexMode": "hybrid",
}
USER = {
    "type": f"user{TAG}",
    "surface": "identity",
    "principalType": "user",
    "jsonSchema": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
    "lookupFields": [{"field": "email"}],
    "indexMode": "none",
}


async def test_records_schemas_principals_and_history(live: Live) -> None:
    ticket = TICKET["type"]
    async with connect(live.url, live.keys.management) as m:
        assert (await ok(m, "schemas_create", **TICKET))["version"] >= 1
        await ok(m, "schemas_create", **USER)
        await ok(m, "scopes_create", paths=[f"org/acme/user/u-{TAG}"])
        # an identity record names the principal whose scope path it is written under
        await ok(m, "record_create", type=USER["type"], payload={"email": f"ann-{TAG}@example.com"},
                 externalId=f"ann-{TAG}", scopes=[[f"org/acme/user/u-{TAG}"]])  # fmt: skip
    async with connect(live.url, live.keys.agent) as c:
        listed = await ok(c, "list_schemas", surface="record")
        assert ticket in [s["type"] for s in listed["schemas"]]
        assert USER["type"] not in [s["type"] for s in listed["schemas"]]
        one = await ok(c, "list_schemas", type=USER["type"])
        assert [s["surface"] for s in one["schemas"]] == ["identity"]
        coverage.passed(SEED, "list_schemas")

        first = await ok(c, "record_create", type=ticket, payload={"title": "Printer jam", "priority": 2},
                         externalId=f"t-{TAG}")  # fmt: skip
        again = await ok(c, "record_create", type=ticket, payload={"title": "Printer jam", "priority": 2},
                         externalId=f"t-{TAG}")  # fmt: skip
        assert again["id"] == first["id"] and first["created"] is True and again["created"] is False
        clash = await c.call_tool("record_create", {"type": ticket, "payload": {"title": "Other", "priority": 1},
                                                    "externalId": f"t-{TAG}"})  # fmt: skip
        assert clash.is_error and clash.structured_content["error"]["code"] == "external_id_conflict"  # type: ignore[index]
        bad = await c.call_tool("record_create", {"type": ticket, "payload": {"title": "x", "priority": 9}})
        assert bad.is_error and "payload.priority" in bad.structured_content["error"]["message"]  # type: ignore[index]
        for n, title in enumerate(["Printer toner", "Projector bulb", "Printer cable"], start=3):
            await ok(c, "record_create", type=ticket, payload={"title": title, "priority": n})
        coverage.passed(SEED, "record_create")

        got = await ok(c, "record_get", id=first["id"])
        assert got["payload"] == {"title": "Printer jam", "priority": 2} and got["version"] == 1
        coverage.passed(SEED, "record_get")
        changed = await ok(c, "record_update", id=first["id"], payload={"title": "Printer fixed", "priority": 1},
                           expectedVersion=1)  # fmt: skip
        assert changed["version"] == 2
        stale = await c.call_tool("record_update", {"id": first["id"], "payload": {"title": "x", "priority": 1},
                                                    "expectedVersion": 1})  # fmt: skip
        assert stale.is_error and stale.structured_content["error"]["code"] == "version_conflict"  # type: ignore[index]
        coverage.passed(SEED, "record_update")

        listed3 = await ok(c, "record_query", type=ticket)  # MCP default: 3
        assert len(listed3["items"]) == 3 and listed3["nextPageToken"]
        rest = await ok(c, "record_query", type=ticket, pageToken=listed3["nextPageToken"])
        assert len(rest["items"]) == 1 and rest["nextPageToken"] is None
        prefix = await ok(c, "record_query", type=ticket, field="title", op="prefix", value="Printer", limit=10)
        assert sorted(r["payload"]["title"] for r in prefix["items"]) == ["Printer cable", "Printer fixed",
                                                                         "Printer toner"]  # fmt: skip
        ranged = await ok(c, "record_query", type=ticket, field="priority", **{"from": 3, "to": 5}, order="desc")
        assert [r["payload"]["priority"] for r in ranged["items"]] == [5, 4, 3]
        exact = await ok(c, "record_query", type=ticket, field="title", value="Printer jam")
        # issue #23: `payload.<field>`, as document_query spells it for typed documents, is the same lookup
        spelled = await ok(c, "record_query", type=ticket, field="payload.title", value="Printer fixed")
        assert [r["payload"]["title"] for r in spelled["items"]] == ["Printer fixed"]
        seats = await ok(c, "record_query", type=ticket, field="payload.priority", **{"from": 3, "to": 5})
        assert [r["id"] for r in seats["items"]] == [r["id"] for r in reversed(ranged["items"])]
        assert exact["items"] == []  # its title changed: the old value no longer finds it
        coverage.passed(SEED, "record_query")

        found = await ok(c, "hybrid_search", query="projector bulb replacement")
        assert any(r.get("record_id") for r in found["results"])
        typed = await ok(c, "hybrid_search", query="printer", type=ticket, limit=10)  # the type filter
        assert typed["results"] and all(r["record"]["type"] == ticket for r in typed["results"])

        gone = await ok(c, "record_delete", id=first["id"])
        assert gone["deleted"] is True and gone["version"] == 3
        assert (await c.call_tool("record_get", {"id": first["id"]})).is_error
        coverage.passed(SEED, "record_delete")

        history = await ok(c, "version_history", id=first["id"])
        assert [(v["version"], v["operation"]) for v in history["versions"]] == [
            (3, "delete"), (2, "update"), (1, "create")
        ]  # fmt: skip
        update = history["versions"][1]
        assert update["actor"]["principal"] == "agent" and update["actor"]["keyId"]
        assert {"op": "replace", "path": "/payload/title", "value": "Printer fixed"} in update["diff"]
        page = await ok(c, "version_history", id=first["id"], limit=1)
        older = await ok(c, "version_history", id=first["id"], limit=2, pageToken=page["nextPageToken"])
        assert [v["version"] for v in older["versions"]] == [2, 1] and older["nextPageToken"] is None
        coverage.passed(SEED, "version_history")

        who = await ok(c, "lookup_principal", externalId=f"u-{TAG}")
        assert who["id"] == f"org/acme/user/u-{TAG}" and who["type"] == "user"
        by_email = await ok(c, "lookup_principal", type=USER["type"], field="email", value=f"ann-{TAG}@example.com")
        assert by_email["id"] == f"org/acme/user/u-{TAG}" and by_email["externalId"] == f"ann-{TAG}"
        nobody = await c.call_tool("lookup_principal", {"externalId": f"nobody-{TAG}"})
        assert nobody.is_error and nobody.structured_content["error"]["status"] == 404  # type: ignore[index]
        coverage.passed(SEED, "lookup_principal")


async def test_the_two_resources(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        resources = {str(r.uri): r for r in (await c.list_resources()).resources}
        assert set(resources) == {"engram://schemas", "engram://identity"}
        catalog = await c.read_resource("engram://schemas")
        identity = await c.read_resource("engram://identity")
        assert json.loads(catalog.contents[0].text) == await ok(c, "list_schemas")  # type: ignore[union-attr]
        assert json.loads(identity.contents[0].text) == await ok(c, "current_identity")  # type: ignore[union-attr]
        assert (await c.list_prompts()).prompts == []


def test_unknown_tool_names_fail_fast_at_startup(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """ "Narrow the catalog ... with VECTROS_MCP_TOOLS ... (e.g. "hybrid_search,rag_ask") ... Unknown tool names
    fail fast at startup with a clear error." Engram's variable is ENGRAM_MCP_TOOLS."""
    from engram.cli.main import main
    from engram.families import select

    assert [op.name for op in select({"hybrid_search", "rag_ask"})] == ["hybrid_search", "rag_ask"]
    monkeypatch.setenv("ENGRAM_MCP_TOOLS", "hybrid_search,rag_ask,web_search")
    assert main(["serve", "--data-dir", str(tmp_path), "--port", "1"]) == 2
    assert "unknown tools: web_search" in capsys.readouterr().err
