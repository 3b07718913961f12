"""Issue #22 through the Lambda path: every class of hostile input, sent as API Gateway v2 events through the
template's routes, authorizer and functions (DynamoDB, S3 and SQS on moto, a real OpenSearch node)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram.kernel.caller import ANY
from tests.aws_lambda.apigw import Environments, Response
from tests.aws_lambda.conftest import Stack, load_function
from tests.aws_lambda.test_functions import MCP_HEADERS, call
from tests.concurrency import together
from tests.fixtures.listener import loopback_listener

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]


def rest(stack: Stack, method: str, path: str, body: Any, key: str) -> Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return stack.api.request(method, f"/api/v1/acme{path}", raw if method != "GET" else None, key)


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    with loopback_listener(b'{"enum": ["SECRET"]}') as found:
        yield found


def test_schemas_reach_nowhere_and_patterns_cannot_stall(
    stack: Stack, tmp_path: Path, listener: tuple[str, list[str]]
) -> None:
    url, seen = listener
    secret = tmp_path / "s.json"
    secret.write_text('{"enum": ["FILE-SECRET"]}')
    for ref in (secret.as_uri(), f"{url}/x.json", "#/$defs/missing"):
        schema = {"type": "lam-ref", "jsonSchema": {"type": "object", "properties": {"a": {"$ref": ref}}}}
        answer = rest(stack, "POST", "/schemas", schema, stack.keys.management)
        assert answer.status == 400 and "SECRET" not in answer.body.decode(), answer.body
    assert seen == []
    evil = {"type": "lam-evil", "jsonSchema": {"type": "object", "properties": {"a": {"pattern": "^(a+)+$"}}}}
    assert rest(stack, "POST", "/schemas", evil, stack.keys.management).status == 200
    started = time.perf_counter()
    answer = rest(stack, "POST", "/records", {"type": "lam-evil", "payload": {"a": "a" * 40 + "!"}}, stack.keys.agent)
    assert answer.status == 400 and answer.json()["error"]["code"] == "schema_violation"
    assert time.perf_counter() - started < 5  # a backtracking engine: hours for 40 characters


def test_lone_surrogates_and_oversize_metadata_are_refused_naming_the_field(stack: Stack) -> None:
    body = b'{"key": "lam", "value": {"note": "\\ud800"}}'
    answer = rest(stack, "PUT", "/context/value", body, stack.keys.agent)
    assert answer.status == 400 and answer.json()["error"]["details"]["field"] == "value.note", answer.body
    rpc = (b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "entity_update", '
           b'"arguments": {"entity_id": "Person:x", "metadata": {"m": "\\udfff"}}}}')  # fmt: skip
    for path in ("/mcp", "/mcp/entities"):
        answer = stack.api.request("POST", path, rpc, stack.keys.agent, MCP_HEADERS)
        assert answer.status == 400, answer.body
        assert answer.json()["error"]["data"]["field"] == "params.arguments.metadata.m"
    big = {"entity_id": "Person:x", "metadata": {"blob": "x" * 20_000}}
    answer = rest(stack, "PATCH", "/entities", big, stack.keys.agent)
    assert answer.status == 400 and "the limit is 16384" in answer.json()["error"]["message"]
    assert rest(stack, "GET", "/context/value?key=lam", None, stack.keys.agent).status == 404  # nothing written


def test_a_body_nested_too_deep_is_a_parse_error_through_the_gateway(stack: Stack) -> None:
    """The gateway reads a POST to /mcp for the family to forward it to: JSON nested deeper than Python's parser goes
    raised RecursionError there (a 500 from the function); now no family, and the MCP server's parse error."""
    deep = b'{"method": "tools/call", "params": {"_meta": {"progressToken": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}}"
    for path in ("/mcp", "/mcp/memory"):
        answer = stack.api.request("POST", path, deep, stack.keys.agent, MCP_HEADERS)
        assert answer.status < 500 and b"-32700" in answer.body, (path, answer.status, answer.body[:300])


def test_a_shared_entity_is_merged_only_by_a_key_that_sees_all_of_it(stack: Stack) -> None:
    ident = stack.engram.identity
    ident.register_scopes("acme", ["org/acme/user/alice", "org/acme/user/bob"])
    alice, _ = ident.create_key(["acme"], "agent", ["org/acme/user/alice"])
    bob, _ = ident.create_key(["acme"], "agent", ["org/acme/user/bob"])
    call(stack, "memory_store", {"content": "My sister is Wanda Lambda."}, alice)
    call(stack, "memory_store", {"content": "My friend is Wanda Lambda."}, bob)
    merged = call(stack, "entity_merge", {"keep_id": "Person:bob", "remove_id": "Person:wanda lambda"}, bob)
    assert merged.get("isError") and merged["structuredContent"]["error"]["code"] == "in_use", merged
    mine = call(stack, "entity_relationships", {"entity_id": "Person:wanda lambda"}, alice)["structuredContent"]
    assert [r["type"] for r in mine["relationships"]] == ["sister"]


def test_metrics_are_per_tenant(stack: Stack) -> None:
    def count(key: str) -> int:
        seen = call(stack, "get_performance_metrics", {}, key)["structuredContent"]["latency"]["by_tool"]
        return int(seen.get("folder_query", {}).get("count", 0))

    ours, theirs = count(stack.keys.management), count(stack.keys.other_tenant)
    for _ in range(3):
        call(stack, "folder_query", {}, stack.keys.other_tenant)
    assert count(stack.keys.management) == ours  # the other tenant's calls are not in this tenant's figures
    assert count(stack.keys.other_tenant) == theirs + 3


def test_parallel_syncs_all_land_and_a_large_file_writes_at_once(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    key = stack.keys.agent
    call(stack, "write_code", {"path": "lam/doc.md", "content": "# Doc\n", "reason": "start"}, key)
    session = call(stack, "create_session", {"session_name": "s", "document_paths": ["lam/doc.md"]}, key)
    sid = session["structuredContent"]["session_id"]
    # ten invocations at once: ten execution environments of the workspace function, one DynamoDB table
    monkeypatch.setitem(
        stack.api.functions, "WorkspaceFunction", Environments(lambda: load_function("workspace").handler)
    )

    def sync(i: int) -> None:
        ops = [{"type": "insert", "position": 0, "content": f"<{i:02d}>"}]
        arguments = {"document_id": "lam/doc.md", "operations": ops, "agent_id": f"a{i}", "session_id": sid}
        out = call(stack, "sync_document", arguments, key, "/mcp/workspace")
        assert not out.get("isError"), out

    assert together(10, sync) == []
    read = call(stack, "read_code", {"path": "lam/doc.md"}, key)["structuredContent"]
    assert [i for i in range(10) if f"<{i:02d}>" not in read["content"]] == []
    text = "".join(f"import mod{i}\n" for i in range(20_000))
    written = call(stack, "write_code", {"path": "lam/big.py", "content": text, "reason": "big"}, key)
    assert not written.get("isError"), written
    stack.drain()  # its vectors, from the queue
    found = call(stack, "semantic_search", {"query": "import mod19999"}, key)
    assert not found.get("isError"), found
    _, p = stack.engram.identity.create_key(["acme"], "agent", ["org/acme"])
    assert stack.engram.workspace.exists(stack.engram.identity.enter(p, "acme", ANY, "t"), "lam/big.py")


def test_the_graph_is_fed_through_the_worker(stack: Stack) -> None:
    """Issue #23 on AWS: a message's graph job goes to SQS with the message's commit; the worker function runs it."""
    key = stack.keys.agent
    text = "Priya Nair works at Umbrella Corporation, which is based in Raccoon City."
    assert not call(stack, "conversation_append", {"thread_id": "lam-graph", "role": "user", "content": text}, key).get(
        "isError"
    )
    stack.drain()
    found = call(stack, "entity_query", {"name": "Umbrella Corporation"}, key)["structuredContent"]["entity"]
    assert found["mention_count"] == 1 and found["sources"][0]["kind"] == "message"
    rels = call(stack, "entity_relationships", {"entity_id": "Person:priya nair"}, key)["structuredContent"]
    assert [(r["type"], r["target"]["name"]) for r in rels["relationships"]] == [("works_at", "Umbrella Corporation")]


def test_the_largest_values_of_wide_characters_are_stored_and_read_back(stack: Stack) -> None:
    """Stored escaped to ASCII, a 250 KB context value of accented text (within its 256 KiB) and a message of
    32,000 emoji (within its 32,000 characters) went past DynamoDB's 400 KB item: a 503 for valid input."""
    value = {"v": "é" * 125_000}
    assert rest(stack, "PUT", "/context/value", {"key": "wide", "value": value}, stack.keys.agent).status == 200
    got = stack.api.request("GET", "/api/v1/acme/context/value?key=wide", None, stack.keys.agent)
    assert got.status == 200 and got.json()["value"] == value
    content, meta = "\U0001f600" * 32_000, {"m": "\U0001f600" * 3_000}
    message = {"thread_id": "wide", "role": "user", "content": content, "metadata": meta}
    assert rest(stack, "POST", "/threads/messages", message, stack.keys.agent).status == 200
    history = call(stack, "conversation_history", {"thread_id": "wide"}, stack.keys.agent)["structuredContent"]
    assert [m["content"] for m in history["messages"]] == [content]
    assert rest(stack, "POST", "/facts", {"content": "\U0001f600" * 32_000}, stack.keys.agent).status == 200
