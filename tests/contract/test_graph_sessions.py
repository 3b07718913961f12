"""Issue #23, replayed as each seed's client would, over real HTTP with the MCP client, on both adapter sets: a
client that uses only Cortex's tools, only Spectron's, or only Vectros' writes sees the entities and typed
relations its own writes made (Vectros has no entity tool: its writes are read back through the graph's tools
on the same key)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.client import Client

from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.wiring import Engram
from tests.functional.mcpclient import connect


@dataclass
class Served:
    url: str
    engram: Engram
    agent: str
    management: str


@pytest.fixture
def served(both: Engram) -> Iterator[Served]:
    """The engram of `both` (SQLite, or DynamoDB + S3 + OpenSearch) behind `create_app` on a loopback port;
    no worker runs in it: `engram.kernel.queue.join()` is the worker, run when a test says so."""
    agent, _ = both.identity.create_key(["acme"], "agent", ["org/acme"])
    management, _ = both.identity.create_key(["acme"], "management", ["org/acme"])
    with in_thread(create_app(both)) as url:
        yield Served(url, both, agent, management)


async def call(c: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await c.call_tool(tool, arguments)
    assert not result.is_error and result.structured_content is not None, (tool, result)
    return result.structured_content


async def test_a_cortex_client_sees_the_graph_of_its_conversations_and_documents(served: Served) -> None:
    async with connect(served.url, served.agent) as c:
        for role, content in [
            ("user", "I had a call with Jane Smith from Acme Corporation about the renewal."),
            ("assistant", "Noted. Jane Smith works at Acme Corporation as head of procurement."),
            ("user", "Bob Jones is the CEO of Acme Corporation and signs the contract."),
        ]:
            await call(c, "conversation_append", {"thread_id": "sales-call-1", "role": role, "content": content})
        await call(c, "knowledge_ingest", {"collection": "accounts", "title": "Acme account",
                                           "content": "Acme Corporation is headquartered in Boston. "
                                                      "Jane Smith reports to Bob Jones."})  # fmt: skip
        served.engram.queue.join()
        listed = await call(c, "entity_list", {})
        assert {"Jane Smith", "Bob Jones", "Acme Corporation", "Boston"} <= {x["name"] for x in listed["entities"]}
        acme = (await call(c, "entity_query", {"name": "Acme Corporation"}))["entity"]
        assert acme["type"] == "Organization" and acme["mention_count"] == 4 and acme["description"]
        jane_id = (await call(c, "entity_query", {"name": "jane smith"}))["entity"]["id"]
        rels = (await call(c, "entity_relationships", {"entity_id": jane_id}))["relationships"]
        assert {(r["type"], r["target"]["name"]) for r in rels} == {("works_at", "Acme Corporation"),
                                                                  ("reports_to", "Bob Jones")}  # fmt: skip
        found = (await call(c, "entity_search", {"query": "Acme", "limit": 5}))["results"]
        assert found and found[0]["name"] == "Acme Corporation"
        # Cortex's example edge, from the CEO's side
        bob = (await call(c, "entity_query", {"name": "Bob Jones"}))["entity"]
        incoming = await call(c, "entity_relationships", {"entity_id": bob["id"], "direction": "outgoing"})
        assert [r["type"] for r in incoming["relationships"]] == ["works_at"]


async def test_a_spectron_client_sees_nodes_with_their_edges(served: Served) -> None:
    async with connect(served.url, served.agent) as c:
        served.engram.identity.register_scopes("acme", ["org/acme/user/alice"])
        await call(c, "memory_store", {"content": "My name is Alice. I work at Acme Corp.",
                                       "scopes": [["org/acme/user/alice"]]})  # fmt: skip
        team = b"# Team\n\nDana Reyes is the CTO of Acme Corp. Dana Reyes lives in Lisbon."
        upload = {"bytes_base64": base64.b64encode(team).decode(), "title": "Team", "filename": "team.md"}
        await call(c, "document_upload", upload)
        served.engram.queue.join()
        alice = await call(c, "knowledge_get", {"kind": "node", "node": {"kind": "Person", "slug": "alice"}})
        assert [(x["type"], x["to"][1]) for x in alice["edges"]] == [("works_at", "Acme Corp")]
        dana = await call(c, "knowledge_get", {"kind": "node", "node": {"kind": "person", "slug": "dana_reyes"}})
        assert sorted((x["type"], x["to"][1]) for x in dana["edges"]) == [("lives_in", "Lisbon"),
                                                                          ("works_at", "Acme Corp")]  # fmt: skip
        acme = await call(c, "knowledge_get", {"kind": "node", "node": {"kind": "Organization", "slug": "acme corp"}})
        incoming = sorted(x["from"][1].lower() for x in acme["edges"] if x["direction"] == "incoming")
        assert incoming == ["alice", "dana reyes"]  # memory's subject (its scope's user) and the document's CTO


async def test_a_vectros_clients_documents_and_records_feed_the_graph(served: Served) -> None:
    async with connect(served.url, served.management) as m:
        schema = {"type": "contact", "jsonSchema": {"type": "object", "properties": {"notes": {"type": "string"}}},
                  "indexMode": "hybrid"}  # fmt: skip
        await call(m, "schemas_create", schema)
    async with connect(served.url, served.agent) as c:
        doc = await call(c, "document_ingest", {"title": "Vendor", "text": "Globex Inc is based in Springfield. "
                                                "Hank Scorpio founded Globex Inc."})  # fmt: skip
        rec = await call(c, "record_create", {"type": "contact", "payload": {"notes": "Mona Liu joined Globex Inc."}})
        served.engram.queue.join()
        globex = (await call(c, "entity_query", {"name": "Globex"}))["entity"]
        assert globex["mention_count"] == 2 and {s["kind"] for s in globex["sources"]} == {"document", "record"}
        rels = (await call(c, "entity_relationships", {"entity_id": globex["id"]}))["relationships"]
        assert sorted((r["type"], r["target"]["name"]) for r in rels) == [
            ("based_in", "Springfield"), ("founded", "Hank Scorpio"), ("works_at", "Mona Liu")]  # fmt: skip
        # deleting them undoes what they said
        await call(c, "record_delete", {"id": rec["id"]})
        await call(c, "document_delete", {"id": doc["id"]})
        served.engram.queue.join()
        names = {x["name"] for x in (await call(c, "entity_list", {}))["entities"]}
        assert not names & {"Globex Inc", "Hank Scorpio", "Mona Liu", "Springfield"}
