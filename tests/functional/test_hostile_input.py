"""Untrusted input stays data (issue #22), over real HTTP: REST with httpx and MCP as raw JSON-RPC (what a client
library would refuse to send).

- Class 3: a JSON string holding a lone surrogate (`"\\ud800"`) got HTTP 500 on some routes (records, context
  values) and was *stored* by others (entity metadata, message metadata, schemas, decisions), after which every
  read of the object failed. Now: 400 / -32602 naming the field, nothing written; and a value that an older
  version stored reads back (U+FFFD in place of the surrogate), never a 500.
- Class 8: 5 MB of entity metadata was accepted; now a 400 naming the field and the limit.
- Numbers JSON cannot carry portably (NaN, Infinity, 5,000 digits) and nesting past the limit: 400, never 500.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from engram.families.context.service import KIND
from engram.kernel.caller import ANY
from engram.kernel.ports import Write, scan
from tests.conftest import Live

LONE = '"\\ud800"'  # JSON text for a string holding one lone surrogate
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip


def rest(live: Live, key: str, method: str, path: str, body: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    return httpx.request(method, f"{live.url}/api/v1/acme{path}", content=body.encode(), headers=headers, timeout=30)


def mcp(live: Live, key: str, tool: str, arguments_json: str) -> httpx.Response:
    params = f'{{"name": "{tool}", "arguments": {arguments_json}}}'
    body = f'{{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {params}}}'
    headers = {"Authorization": f"Bearer {key}", **MCP_HEADERS}
    return httpx.post(f"{live.url}/mcp", content=body.encode(), headers=headers, timeout=30)


TAG = uuid.uuid4().hex[:6]
# (tool, REST method and path, arguments as JSON text with a lone surrogate, the field the error names)
CASES = [
    ("record_create", "POST", "/records", f'{{"type": "note", "payload": {{"text": {LONE}}}}}', "payload.text"),
    ("context_set", "PUT", "/context/value", f'{{"key": "k{TAG}", "value": {{"a": [1, {LONE}]}}}}', "value.a[1]"),
    ("entity_update", "PATCH", "/entities", f'{{"entity_id": "Person:x", "metadata": {{"m": {LONE}}}}}',
     "metadata.m"),
    ("conversation_append", "POST", "/threads/messages",
     f'{{"thread_id": "t{TAG}", "role": "user", "content": "hi", "metadata": {{"m": {LONE}}}}}', "metadata.m"),
    ("schemas_create", "POST", "/schemas",
     f'{{"type": "s{TAG}", "jsonSchema": {{"type": "object", "description": {LONE}}}}}', "jsonSchema.description"),
    ("record_decision", None, None, f'{{"decision": "d", "reasoning": "r", "context": {{"why": {LONE}}}}}',
     "context.why"),
    ("memory_store", "POST", "/facts", f'{{"content": {LONE}}}', "content"),
]  # fmt: skip


@pytest.mark.parametrize(("tool", "method", "path", "arguments", "field"), CASES, ids=[c[0] for c in CASES])
def test_a_lone_surrogate_is_refused_naming_the_field(
    live: Live, tool: str, method: str | None, path: str | None, arguments: str, field: str
) -> None:
    key = live.keys.management
    answer = mcp(live, key, tool, arguments)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == -32602 and f"params.arguments.{field}" in error["message"], error
    assert answer.json()["id"] == 7
    if method is not None and path is not None:
        refused = rest(live, key, method, path, arguments)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["details"]["field"] == field
    # nothing was written: every read of the tenant still answers
    schemas = httpx.get(f"{live.url}/api/v1/acme/schemas", headers={"Authorization": f"Bearer {key}"})
    assert schemas.status_code == 200 and all(s["type"] != f"s{TAG}" for s in schemas.json()["schemas"])
    got = rest(live, key, "GET", f"/context/value?key=k{TAG}", "")
    assert got.status_code == 404


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ('{"key": "n", "value": NaN}', "value is not a finite number"),
        ('{"key": "n", "value": [Infinity]}', "value[0] is not a finite number"),
        ('{"key": "n", "value": 1' + "0" * 40 + "}", "value is an integer out of range"),
        ('{"key": "n", "value": 1' + "0" * 5000 + "}", "a number too long"),
        ('{"key": "n", "value": ' + "[" * 40 + "]" * 40 + "}", "nests deeper than 32"),
    ],
)
def test_numbers_and_nesting_json_cannot_carry_are_400(live: Live, body: str, says: str) -> None:
    answer = rest(live, live.keys.agent, "PUT", "/context/value", body)
    assert answer.status_code == 400 and says in answer.json()["error"]["message"], answer.text


def test_five_megabytes_of_entity_metadata_is_refused_naming_the_limit(live: Live) -> None:
    body = json.dumps({"entity_id": "Person:x", "metadata": {"blob": "x" * 5_000_000}})
    answer = rest(live, live.keys.agent, "PATCH", "/entities", body)
    assert answer.status_code in (400, 413), answer.text
    if answer.status_code == 400:  # the live server's request limit may answer first (413)
        assert "metadata" in answer.json()["error"]["message"] and "16384" in answer.json()["error"]["message"]
    small = json.dumps({"entity_id": "Person:x", "metadata": {"blob": "x" * 20_000}})
    refused = rest(live, live.keys.agent, "PATCH", "/entities", small)
    assert refused.status_code == 400 and "the limit is 16384" in refused.json()["error"]["message"], refused.text


def test_what_an_older_version_stored_still_reads(live: Live) -> None:
    """Data written before the edge refused lone surrogates (here put straight into the store) reads back with
    U+FFFD in their place, over REST and MCP, for every caller that shares it: no 500, no -32603."""
    e = live.engram
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    e.workctx.set(caller, f"legacy{TAG}", {"ok": True}, None, None)
    [item] = [i for i in scan(e.records, "acme", KIND) if i.id.endswith(f"legacy{TAG}")]
    bad = dict(item.data, value={"text": "before \ud800 after"})
    e.records.transact([Write("acme", item.kind, item.id, bad, "legacy", item.version)], e.clock.now())
    got = rest(live, live.keys.agent, "GET", f"/context/value?key=legacy{TAG}", "")
    assert got.status_code == 200, got.text
    assert got.json()["value"] == {"text": "before \ufffd after"}
    answer = mcp(live, live.keys.agent, "context_get", f'{{"key": "legacy{TAG}"}}')
    assert answer.status_code == 200 and "result" in answer.json(), answer.text
    assert answer.json()["result"]["structuredContent"]["value"] == {"text": "before \ufffd after"}
