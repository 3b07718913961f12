"""Every registered operation, over MCP and REST: minimal valid call, unknown argument, other tenant,
wrong principal. New operations must add a sample call below or this test fails."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from engram.families import select
from engram.families.knowledge.documents import NewDocument
from engram.families.memory.service import Turn
from engram.families.workspace.files import NewFile
from engram.kernel.caller import ANY
from tests.conftest import Live
from tests.functional.mcpclient import connect


def _doc(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    out = live.engram.documents.ingest(caller, NewDocument(b"Rivets hold the wing panels together.", "Wing"))
    return str(out["id"])


def _folder(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    return str(live.engram.documents.folder_create(caller, "f", None, None, None)["id"])


def _thread(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    thread = f"ticket-{uuid.uuid4().hex[:8]}"
    for text in ("My login fails.", "Which browser do you use?", "Firefox, latest."):
        live.engram.conversation.append(caller, thread, "user", text, None)
    return thread


def _entity(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    name = f"Name{uuid.uuid4().hex[:6]}"
    live.engram.memory.store(caller, Turn(f"My sister is {name}.", metadata={"speaker": "Tester"}), None)
    return f"Person:{name.lower()}"


def _ctxkey(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    key = f"notes/{uuid.uuid4().hex[:8]}"
    live.engram.workctx.set(caller, key, {"step": 1}, None, None)
    return key


def _erasure(live: Live) -> str:
    """A finished erasure of a scope nobody wrote under (no family holds its objects: nothing refuses it)."""
    from engram.trust.erasure import Subject

    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.management), "acme", ANY, "t")
    asked = live.engram.erasure.request(caller, Subject(f"org/acme/user/gone-{uuid.uuid4().hex[:8]}"), False)
    live.engram.queue.join()  # the server's worker runs it
    return str(asked["request_id"])


def _export(live: Live) -> str:
    """A finished export of the context (its manager's), run by the server's worker."""
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.management), "acme", ANY, "t")
    started = live.engram.transfers.export(caller, False)
    live.engram.queue.join()
    return str(started["transfer_id"])


SAMPLE_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "email": {"type": "string"}},
    "required": ["title"],
}


def _issuer(live: Live) -> str:
    issuer = "https://gone.example"
    policy = {"issuer": issuer, "audience": ["https://engram.example/mcp"], "grant": ["org/acme/user/bob"]}
    live.engram.identity.trust_issuer(None, policy, "acme")
    return issuer


def _type(live: Live) -> str:
    lookups = [{"field": "title", "ops": ["exact", "prefix"], "kind": "string"}]
    live.engram.schemas.create("acme", "t", "sample", "record", SAMPLE_SCHEMA, lookups, "keyword", None, "")
    return "sample"


def _record(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    out = live.engram.typed.create(caller, _type(live), {"title": "Printer jam"}, None, None, None, None)
    return str(out["id"])


def _code(live: Live) -> str:
    caller = live.engram.identity.enter(live.engram.identity.authenticate(live.keys.agent), "acme", ANY, "t")
    path = f"pkg/mod_{uuid.uuid4().hex[:6]}.py"
    live.engram.workspace.write(caller, NewFile(path, "import os\n\ndef f():\n    return os.sep\n", "sample"))
    return path


B64 = base64.b64encode(b"Flaps increase lift at low speed.").decode()
SAMPLES: dict[str, Any] = {
    "document_upload": lambda live: {"bytes_base64": B64, "filename": f"flaps-{uuid.uuid4().hex}.txt"},
    "knowledge_ingest": {"collection": "docs", "title": "Slats", "content": "Slats delay the stall."},
    "knowledge_bulk_ingest": {"collection": "docs", "documents": [{"title": "Spoilers", "content": "Spoilers."}]},
    "document_ingest": {"text": "Ailerons roll the aircraft."},
    "document_get": lambda live: {"id": _doc(live)},
    "document_chunks": lambda live: {"id": _doc(live)},
    "document_update": lambda live: {"id": _doc(live), "title": "Wing v2"},
    "document_delete": lambda live: {"id": _doc(live)},
    "document_query": {"op": "prefix", "field": "title", "value": "W"},
    "document_ask": lambda live: {"id": _doc(live), "question": "What holds the wing panels?"},
    "knowledge_search": {"query": "wing rivets"},
    "hybrid_search": {"query": "wing rivets"},
    "rag_ask": {"question": "What holds the wing panels?"},
    "knowledge_get": lambda live: {"kind": "document", "id": _doc(live)},
    "knowledge_collections": {"action": "list"},
    "folder_create": {"name": "manuals"},
    "folder_update": lambda live: {"id": _folder(live), "name": "renamed"},
    "folder_delete": lambda live: {"id": _folder(live)},
    "folder_query": {},
    "memory_store": {"content": "I enjoy chess."},
    "memory_store_batch": {"turns": [{"content": "I enjoy go."}]},
    "memory_recall": {"query": "games"},
    "memory_reflect": {"query": "games"},
    "memory_profile": {},
    "memory_forget": {"query": "nothing like this at all"},
    "recall": {"query": "games"},
    "explain": {"topic": "games"},
    "predict": {"context": "games"},
    "list-projects": {},
    "list-sessions": {"project": "org/acme"},
    "reconstruct": {"project": "org/acme"},
    "scopes_create": {"paths": ["org/acme/team/qa"]},
    "current_identity": {},
    "context_set": {"key": "notes/plan", "value": {"step": 1}, "ttl_seconds": 600},
    "context_get": lambda live: {"key": _ctxkey(live)},
    "context_merge": {"key": "notes/plan", "value": {"done": True}},
    "context_list": {"prefix": "notes/"},
    "context_history": lambda live: {"key": _ctxkey(live)},
    "conversation_append": {"thread_id": "support-ticket-456", "role": "user", "content": "I can't access my account"},
    "conversation_history": lambda live: {"thread_id": _thread(live)},
    "conversation_search": {"query": "login fails"},
    "conversation_summarize": lambda live: {"thread_id": _thread(live), "keep_recent": 1},
    "entity_query": lambda live: {"name": _entity(live).split(":")[1]},
    "entity_search": {"query": "sister"},
    "entity_relationships": lambda live: {"entity_id": _entity(live)},
    "entity_update": lambda live: {"entity_id": _entity(live), "description": "A sister."},
    "entity_merge": lambda live: {"keep_id": _entity(live), "remove_id": _entity(live)},
    "entity_list": {"type": "Person", "sort": "mention_count"},
    "schemas_create": {"type": "sample_note", "jsonSchema": SAMPLE_SCHEMA, "lookupFields": [{"field": "title"}]},
    "list_schemas": {},
    "record_create": lambda live: {"type": _type(live), "payload": {"title": "Printer jam"}},
    "record_get": lambda live: {"id": _record(live)},
    "record_update": lambda live: {"id": _record(live), "payload": {"title": "Printer fixed"}},
    "record_delete": lambda live: {"id": _record(live)},
    "record_query": lambda live: {"type": _type(live), "field": "title", "op": "prefix", "value": "Printer"},
    "version_history": lambda live: {"id": _record(live)},
    "lookup_principal": {"externalId": "acme"},
    "audit_query": {"tool": "memory_recall", "limit": 5},
    "audit_verify": {},
    "erasure_request": {"scope": "org/acme/user/bob", "preview": True},
    "erasure_status": lambda live: {"request_id": _erasure(live)},
    "erasure_verify": lambda live: {"request_id": _erasure(live)},
    "subject_export": {"scope": "org/acme/user/bob", "limit": 5},
    "oauth_trust": {
        "issuer": "https://issuer.example",
        "audience": ["https://engram.example/mcp"],
        "grant": ["org/acme"],
    },
    "oauth_issuers": {},
    "quota_set": lambda live: {  # a key below the caller (a manager sets no quota that binds itself)
        "key_id": live.engram.identity.create_key(["acme"], "agent", ["org/acme/user/bob"])[1].key_id,
        "writes_per_day": 1000,
    },
    "quota_get": {},
    "usage_report": {"tool": "memory_recall"},
    "oauth_distrust": lambda live: {"issuer": _issuer(live)},
    "write_code": {"path": "pkg/util.py", "content": "def g():\n    return 1\n", "reason": "sample"},
    "read_code": lambda live: {"path": _code(live)},
    "semantic_search": {"query": "separator of paths", "similarity_threshold": 0.1},
    "analyze_dependencies": lambda live: {"file_path": _code(live)},
    "get_context": {"context_types": ["project", "recent_changes", "errors"]},
    "record_decision": {"decision": "Use pools", "reasoning": "Fewer allocations."},
    "query_history": lambda live: {"entity_id": _code(live), "include_diff": True},
    "create_session": lambda live: {"session_name": "s", "document_paths": [_code(live)]},
    "sync_document": lambda live: {
        "document_id": _code(live),
        "agent_id": "a1",
        "operations": [{"type": "insert", "position": 0, "content": "# hi\n"}],
    },
    "get_performance_metrics": {},
    "memory_timeline": {"key": "location", "limit": 50},
    "entity_graph": {"type": "Person", "limit": 50},
    "context_export": {},
    "context_transfer_status": lambda live: {"transfer_id": _export(live)},
    "context_import": lambda live: {"transfer_id": _export(live)},
}
OPS = select()


def key_for(live: Live, op_name: str) -> str:
    op = next(o for o in OPS if o.name == op_name)
    return live.keys.agent if "agent" in op.principals else live.keys.management


def sample(live: Live, name: str) -> dict[str, Any]:
    value = SAMPLES[name]
    return dict(value(live) if callable(value) else value)


def test_every_operation_has_a_sample() -> None:
    assert {op.name for op in OPS} == set(SAMPLES)


async def failure(c: Any, op: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The error of a call that must fail, in the shape the tool's seed uses: an isError result's
    `structuredContent.error`, or (Causantic, Agrama) a JSON-RPC error whose data carries the same."""
    if op.errors == "jsonrpc":
        with pytest.raises(MCPError) as e:
            await c.call_tool(op.name, args)
        assert e.value.error.code == -32002 and e.value.error.message.startswith(f"{op.name}: ")
        return dict(e.value.error.data)
    if op.errors == "agrama":  # Agrama's error format: a JSON-RPC error, data {details, tool, timestamp, ...}
        with pytest.raises(MCPError) as e:
            await c.call_tool(op.name, args)
        data = dict(e.value.error.data)
        assert -32004 <= e.value.error.code <= -32000 and data["tool"] == op.name and data["details"]
        return data
    result = await c.call_tool(op.name, args)
    assert result.is_error and result.structured_content is not None
    return dict(result.structured_content["error"])


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
async def test_mcp_every_tool(live: Live, op: Any) -> None:
    args = sample(live, op.name)
    async with connect(live.url, key_for(live, op.name)) as c:
        ok = await c.call_tool(op.name, args)
        assert not ok.is_error, ok
        with pytest.raises(MCPError) as e:
            await c.call_tool(op.name, {**args, "unexpected_argument": 1})
        assert e.value.error.code == -32602
        assert (await failure(c, op, {**args, "context_id": "globex"}))["status"] == 401
    async with connect(live.url, live.keys.other_tenant) as c:
        assert (await failure(c, op, {**args, "context_id": "acme"}))["status"] == 401


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_rest_every_route(live: Live, op: Any) -> None:
    args = sample(live, op.name)
    path = op.path
    for name in ("id",):
        if f"{{{name}}}" in path:
            path = path.replace(f"{{{name}}}", args.pop(name))
    url = f"{live.url}/api/v1/acme{path}"
    h = {"Authorization": f"Bearer {key_for(live, op.name)}"}

    def send(body: dict[str, Any], headers: dict[str, str], target: str = url) -> httpx.Response:
        if op.method in ("GET", "DELETE"):
            return httpx.request(op.method, target, params=body, headers=headers)
        return httpx.request(op.method, target, json=body, headers=headers)

    assert send(args, h).status_code == 200
    assert send({**args, "unexpected_argument": "1"}, h).status_code == 400
    assert send(args, h, f"{live.url}/api/v1/globex{path}").status_code == 401
    assert send(args, {}).status_code == 401
    if not {"supervisor", "agent"} & set(op.principals):
        denied = send(args, {"Authorization": f"Bearer {live.keys.agent}"})
        assert denied.status_code == 403
    elif "supervisor" not in op.principals:
        denied = send(args, {"Authorization": f"Bearer {live.keys.supervisor}"})
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "principal_not_allowed"
