"""The functions of template.yaml, invoked with API Gateway v2 events through the template's routes and
authorizer, over moto and a real OpenSearch node: MCP through the /mcp gateway and each family's
endpoint, REST routes, keys, the worker's SQS batches."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from engram.api.lambda_runtime import gateway_handler
from engram.families import select
from engram.settings import Settings
from engram.wiring import build
from tests.aws_lambda.apigw import EVENTS, Response, invoke
from tests.aws_lambda.conftest import Stack
from tests.fixtures.files import RETURNS_PDF, make_pdf

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]
MCP_HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}


def rpc(stack: Stack, path: str, method: str, params: dict[str, Any], key: str | None, rid: int = 1) -> Response:
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    return stack.api.request("POST", path, body, key, MCP_HEADERS)


def call(stack: Stack, tool: str, arguments: dict[str, Any], key: str, path: str = "/mcp") -> dict[str, Any]:
    answer = rpc(stack, path, "tools/call", {"name": tool, "arguments": arguments}, key)
    assert answer.status == 200, answer.body
    assert "result" in answer.json(), answer.body
    result: dict[str, Any] = answer.json()["result"]
    return result


def event_file(name: str, **values: str) -> dict[str, Any]:
    text = (EVENTS / name).read_text()
    for k, v in values.items():
        text = text.replace("${" + k + "}", v)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def test_gateway_initialize_and_lists_every_tool(stack: Stack) -> None:
    init = rpc(
        stack,
        "/mcp",
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        stack.keys.agent,
    )
    assert init.status == 200 and init.json()["result"]["serverInfo"]["name"] == "engram"
    listed = rpc(stack, "/mcp", "tools/list", {}, stack.keys.agent).json()["result"]["tools"]
    assert {t["name"] for t in listed} == {n for op in select() for n in op.names}
    memory_only = rpc(stack, "/mcp/memory", "tools/list", {}, stack.keys.agent).json()["result"]["tools"]
    assert {t["name"] for t in memory_only} == {n for op in select(family="memory") for n in op.names}


def test_health_answers_get_and_head_without_a_key(stack: Stack) -> None:
    for method in ("GET", "HEAD"):
        answer = stack.api.request(method, "/healthz")
        assert answer.status == 200, (method, answer.status, answer.body)
    assert stack.api.request("GET", "/healthz").json()["status"] == "ok"


def test_the_recorded_initialize_event_as_api_gateway_sends_it(stack: Stack) -> None:
    event = event_file("mcp_initialize.json", KEY=stack.keys.agent)
    authorizer = event_file("authorizer_request.json", KEY=stack.keys.agent)
    verdict = invoke(stack.handlers["AuthorizerFunction"], "authorizer", authorizer)
    assert verdict["isAuthorized"] is True and verdict["context"]["role"] == "agent"
    event["requestContext"]["authorizer"] = {"lambda": verdict["context"]}
    answer = invoke(stack.handlers["GatewayFunction"], "gateway", event)
    assert answer["statusCode"] == 200
    assert json.loads(answer["body"])["result"]["protocolVersion"] == "2025-11-25"


def test_tools_call_through_the_gateway_runs_in_the_family_function(stack: Stack) -> None:
    stored = call(stack, "memory_store", {"content": "I live in Lisbon and I work at Initech."}, stack.keys.agent)
    assert not stored.get("isError"), stored
    assert stored["structuredContent"]["turn_id"]
    moved = call(stack, "memory_store", {"content": "Actually, I moved to Porto."}, stack.keys.agent, "/mcp/memory")
    assert moved["structuredContent"]["attributes"][0]["action"] == "superseded"
    recall = call(stack, "memory_recall", {"query": "where does the user live"}, stack.keys.agent)
    texts = [r["text"] for r in recall["structuredContent"]["results"]]
    assert "user location: Porto" in texts and "user location: Lisbon" not in texts, texts
    # what the gateway relayed came from the memory function: the records are in DynamoDB
    assert stack.engram.records.get("acme", "turn", stored["structuredContent"]["turn_id"]) is not None


def test_tool_errors_keep_the_mcp_shape_through_the_gateway(stack: Stack) -> None:
    bad = call(stack, "document_get", {"id": "no-such-document"}, stack.keys.agent)
    assert bad["isError"] is True and bad["structuredContent"]["error"]["status"] == 404
    unknown = rpc(stack, "/mcp", "tools/call", {"name": "no_such_tool", "arguments": {}}, stack.keys.agent)
    assert unknown.json()["error"]["code"] == -32601
    oversized_k = rpc(
        stack, "/mcp", "tools/call", {"name": "hybrid_search", "arguments": {"query": "x", "k": 11}}, stack.keys.agent
    )
    assert oversized_k.json()["error"]["code"] == -32602
    other_family = rpc(
        stack, "/mcp/memory", "tools/call", {"name": "document_get", "arguments": {"id": "x"}}, stack.keys.agent
    )
    assert other_family.json()["error"]["code"] == -32601


@pytest.mark.parametrize("path", ["/mcp", "/mcp/memory", "/api/v1/acme/profile"])
def test_keys_are_enforced_on_every_route(stack: Stack, path: str) -> None:
    method = "GET" if path.startswith("/api") else "POST"
    body = None if method == "GET" else {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for key in (stack.keys.revoked, "sk-not-a-key", "not-even-sk"):
        answer = stack.api.request(method, path, body, key, MCP_HEADERS)
        assert answer.status == 401, (key, answer.body)
        assert answer.json()["error"]["status"] == 401 and "bearer" in answer.headers["www-authenticate"].lower()
    assert stack.api.request(method, path, body, None, MCP_HEADERS).status == 401  # no header: API Gateway's 401


def test_another_tenants_context_is_masked(stack: Stack) -> None:
    answer = stack.api.request("GET", "/api/v1/acme/profile", None, stack.keys.other_tenant)
    assert answer.status == 401
    via_mcp = call(stack, "memory_profile", {"context_id": "acme"}, stack.keys.other_tenant)
    assert via_mcp["isError"] and via_mcp["structuredContent"]["error"]["status"] == 401


def test_rest_routes_reach_their_family_function(stack: Stack) -> None:
    stored = stack.api.request(
        "POST", "/api/v1/acme/facts", {"content": "My favourite colour is teal."}, stack.keys.agent
    )
    assert stored.status == 200, stored.body
    profile = stack.api.request("GET", "/api/v1/acme/profile", None, stack.keys.agent)
    assert profile.status == 200 and "teal" in json.dumps(profile.json())
    me = stack.api.request("GET", "/api/v1/acme/identity", None, stack.keys.supervisor).json()
    assert me["principal"] == "supervisor" and me["context_id"] == "acme"
    assert stack.api.request("GET", "/api/v1/acme/nowhere", None, stack.keys.agent).status == 404
    bad = stack.api.request("POST", "/api/v1/acme/facts", {"content": "x", "bogus": 1}, stack.keys.agent)
    assert bad.status == 400 and "bogus" in bad.json()["error"]["message"]


def test_the_context_family_through_its_function(stack: Stack) -> None:
    """Cortex's context tools on the Lambda path: REST (a key with "/" in the query string) and MCP through
    the gateway, records in DynamoDB."""
    put = stack.api.request(
        "PUT", "/api/v1/acme/context/value", {"key": "run/plan", "value": {"a": 1}}, stack.keys.agent
    )
    assert put.status == 200 and put.json()["version"] == 1, put.body
    merged = call(stack, "context_merge", {"key": "run/plan", "value": {"b": 2}}, stack.keys.agent)
    assert merged["structuredContent"] == {"key": "run/plan", "version": 2, "merged_keys": ["b"]}
    got = stack.api.request("GET", "/api/v1/acme/context/value?key=run%2Fplan", None, stack.keys.agent)
    assert got.status == 200 and got.json()["value"] == {"a": 1, "b": 2}, got.body
    missing = call(stack, "context_get", {"key": "nothing/here"}, stack.keys.agent, "/mcp/context")
    assert missing["isError"] and missing["structuredContent"]["error"]["code"] == "not_found"
    assert [i.data["key"] for i in stack.engram.records.query("acme", "ctxkey").items] == ["run/plan"]


def test_the_conversation_family_through_its_function(stack: Stack) -> None:
    """Cortex's conversation tools on the Lambda path: MCP through the gateway and REST; messages in
    DynamoDB, searchable in OpenSearch at once."""
    for text in ("My order 1234 never arrived.", "Sorry! I will resend order 1234 today."):
        sent = call(stack, "conversation_append", {"thread_id": "order-1234", "role": "user", "content": text},
                    stack.keys.agent)  # fmt: skip
        assert not sent.get("isError"), sent
    history = stack.api.request("GET", "/api/v1/acme/threads/messages?thread_id=order-1234", None, stack.keys.agent)
    assert history.status == 200 and len(history.json()["messages"]) == 2, history.body
    found = call(stack, "conversation_search", {"query": "resend order"}, stack.keys.agent, "/mcp/conversation")
    assert found["structuredContent"]["results"][0]["content"].startswith("Sorry!")
    assert (
        len([i for i in stack.engram.records.query("acme", "message").items if i.data["thread_id"] == "order-1234"])
        == 2
    )


def test_the_entities_family_through_its_function(stack: Stack) -> None:
    """Entities that the memory function extracts, read and changed through the entities function."""
    stored = call(stack, "memory_store", {"content": "My manager is Ingrid Berg."}, stack.keys.agent)
    assert not stored.get("isError"), stored
    found = call(stack, "entity_query", {"name": "ingrid berg"}, stack.keys.agent, "/mcp/entities")
    ingrid = found["structuredContent"]["entity"]
    assert ingrid["name"] == "Ingrid Berg" and ingrid["type"] == "Person"
    changed = stack.api.request("PATCH", "/api/v1/acme/entities", {"entity_id": ingrid["id"], "description": "Manager"},
                                stack.keys.agent)  # fmt: skip
    assert changed.status == 200 and changed.json()["updated_fields"] == ["description"], changed.body
    rels = stack.api.request("GET", f"/api/v1/acme/entities/relationships?entity_id={ingrid['id']}", None,
                             stack.keys.agent)  # fmt: skip
    assert rels.status == 200 and rels.json()["relationships"][0]["type"] == "manager", rels.body


def test_the_records_family_through_its_function(stack: Stack) -> None:
    """Vectros' records on the Lambda path: a schema registered over REST by management, records written
    through the gateway (MCP) and the records function (REST), looked up by key range in DynamoDB, found in
    OpenSearch, their history read; the two resources read through the gateway."""
    schema = {"type": "ticket", "jsonSchema": {"type": "object", "properties": {"title": {"type": "string"}},
              "required": ["title"]}, "lookupFields": [{"field": "title", "ops": ["exact", "prefix"]}],
              "indexMode": "keyword"}  # fmt: skip
    made = stack.api.request("POST", "/api/v1/acme/schemas", schema, stack.keys.management)
    assert made.status == 200 and made.json()["version"] >= 1, made.body
    refused = stack.api.request("POST", "/api/v1/acme/schemas", schema, stack.keys.agent)
    assert refused.status == 403, refused.body
    first = call(stack, "record_create", {"type": "ticket", "payload": {"title": "Lambda printer jam"}},
                 stack.keys.agent)["structuredContent"]  # fmt: skip
    rest = stack.api.request("POST", "/api/v1/acme/records", {"type": "ticket", "payload": {"title": "Lambda toner"}},
                             stack.keys.agent)  # fmt: skip
    assert rest.status == 200 and rest.json()["version"] == 1, rest.body
    bad = stack.api.request("POST", "/api/v1/acme/records", {"type": "ticket", "payload": {"title": 5}},
                            stack.keys.agent)  # fmt: skip
    assert bad.status == 400 and bad.json()["error"]["code"] == "schema_violation", bad.body
    lookup = {"type": "ticket", "field": "title", "op": "prefix", "value": "Lambda"}
    found = stack.api.request("POST", "/api/v1/acme/records/lookup", lookup, stack.keys.agent)
    assert [r["payload"]["title"] for r in found.json()["items"]] == ["Lambda printer jam", "Lambda toner"]
    changed = stack.api.request("PATCH", f"/api/v1/acme/records/{first['id']}",
                                {"payload": {"title": "Lambda printer fixed"}, "expectedVersion": 1},
                                stack.keys.agent)  # fmt: skip
    assert changed.status == 200 and changed.json()["version"] == 2, changed.body
    history = call(stack, "version_history", {"id": first["id"]}, stack.keys.agent, "/mcp/records")
    assert [v["operation"] for v in history["structuredContent"]["versions"]] == ["update", "create"]
    searched = call(stack, "hybrid_search", {"query": "printer fixed"}, stack.keys.agent)
    assert first["id"] in [r.get("record_id") for r in searched["structuredContent"]["results"]]
    listed = rpc(stack, "/mcp", "resources/list", {}, stack.keys.agent).json()["result"]["resources"]
    assert {r["uri"] for r in listed} == {"engram://schemas", "engram://identity"}
    catalog = rpc(stack, "/mcp", "resources/read", {"uri": "engram://schemas"}, stack.keys.agent).json()
    assert json.loads(catalog["result"]["contents"][0]["text"])["schemas"][0]["type"] == "ticket"
    me = rpc(stack, "/mcp", "resources/read", {"uri": "engram://identity"}, stack.keys.agent).json()
    assert json.loads(me["result"]["contents"][0]["text"])["principal"] == "agent"


def test_the_workspace_family_through_its_function(stack: Stack) -> None:
    """Agrama's tools on the Lambda path: files written through the gateway (MCP) and the workspace function
    (REST), versions in DynamoDB, content in S3, code search in OpenSearch; Agrama's hybrid_search through
    the knowledge function; a syntax error as Agrama's JSON-RPC error."""
    util = {"path": "lam/util.py", "content": "def checksum(data):\n    return sum(data) % 255\n",
            "reason": "helper", "agent_id": "lambda-test"}  # fmt: skip
    wrote = call(stack, "write_code", util, stack.keys.agent)
    assert wrote["structuredContent"]["success"] and wrote["structuredContent"]["version"] == 1
    main = {"path": "lam/main.py", "content": "from lam import util\n\nprint(util.checksum(b'abc'))\n",
            "reason": "entry point"}  # fmt: skip
    rest = stack.api.request("POST", "/api/v1/acme/code/write", main, stack.keys.agent)
    assert rest.status == 200 and rest.json()["version"] == 1, rest.body
    deps = call(stack, "analyze_dependencies", {"file_path": "lam/util.py"}, stack.keys.agent, "/mcp/workspace")
    assert deps["structuredContent"]["dependents"] == [{"path": "lam/main.py", "depth": 1}]
    bad = rpc(stack, "/mcp", "tools/call", {"name": "write_code", "arguments": {
        "path": "lam/bad.py", "content": "def f(:\n", "reason": "broken"}}, stack.keys.agent).json()  # fmt: skip
    assert bad["error"]["code"] == -32003 and bad["error"]["data"]["line"] == 1, bad
    found = call(stack, "hybrid_search", {"query": "checksum of data", "context_files": ["lam/main.py"],
                                          "max_results": 5}, stack.keys.agent)  # fmt: skip
    top = found["structuredContent"]["results"][0]
    assert top["path"] == "lam/util.py" and top["graph_distance"] == 1, found
    read = call(stack, "read_code", {"path": "lam/util.py", "include_history": True}, stack.keys.agent)
    assert read["structuredContent"]["history"][0]["agent_id"] == "lambda-test"
    files = [i for i in stack.engram.records.query("acme", "wfile").items if i.data["path"].startswith("lam/")]
    assert sorted(i.data["path"] for i in files) == ["lam/main.py", "lam/util.py"]
    assert stack.engram.blobs.get(files[1].data["blob_key"]).decode().startswith("def checksum")


def test_the_recorded_rest_event(stack: Stack) -> None:
    event = event_file("rest_memory_store.json", KEY=stack.keys.agent)
    answer = invoke(stack.handlers["MemoryFunction"], "memory", event)  # no authorizer context: key looked up
    assert answer["statusCode"] == 200, answer["body"]
    assert any(a["key"] == "location" for a in json.loads(answer["body"])["attributes"])


def test_a_long_pdf_uploads_and_is_indexed_through_the_functions(stack: Stack) -> None:
    """90 chunks: more than one DynamoDB transaction takes (it was a 400 `too_many_writes`)."""
    import base64

    pages = [[f"The gearbox{i} manual. " + "Oil the bearings weekly. " * 40] for i in range(90)]
    pdf = make_pdf(pages)
    up = call(stack, "document_upload", {"bytes_base64": base64.b64encode(pdf).decode(), "filename": "long.pdf"},
              stack.keys.management)["structuredContent"]  # fmt: skip
    assert up["chunks_created"] >= 90, up
    answers = stack.drain()
    assert answers and all(a["batchItemFailures"] == [] for a in answers)
    got = call(stack, "document_get", {"id": up["id"]}, stack.keys.agent)["structuredContent"]
    assert got["status"] == "indexed"
    found = call(stack, "knowledge_search", {"query": "gearbox89 manual", "mode": "bm25", "k": 1},
                 stack.keys.agent)["structuredContent"]  # fmt: skip
    assert found["results"][0]["document_id"] == up["id"] and "gearbox89" in json.dumps(found["results"][0])


def test_upload_is_searchable_at_once_and_embedded_by_the_worker(stack: Stack) -> None:
    import base64

    pdf = make_pdf(RETURNS_PDF)
    up = call(
        stack,
        "document_upload",
        {"bytes_base64": base64.b64encode(pdf).decode(), "title": "Returns", "filename": "returns.pdf"},
        stack.keys.management,
    )
    doc = up["structuredContent"]
    assert doc["status"] == "queued"
    found = call(
        stack, "knowledge_search", {"query": "return window unopened items", "mode": "bm25", "k": 1}, stack.keys.agent
    )["structuredContent"]
    assert found["results"][0]["document_id"] == doc["id"]
    answers = stack.drain()  # the knowledge function queued the embedding job on SQS
    assert answers and all(a["batchItemFailures"] == [] for a in answers)
    got = call(stack, "document_get", {"id": doc["id"]}, stack.keys.agent)["structuredContent"]
    assert got["status"] == "indexed"
    vector = call(
        stack,
        "knowledge_search",
        {"query": "how long can I send things back", "mode": "vector", "k": 3},
        stack.keys.agent,
    )["structuredContent"]
    assert doc["id"] in {r["document_id"] for r in vector["results"]}


def test_inbox_files_are_ingested_from_s3_events(stack: Stack) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    bucket = stack.engram.settings.bucket
    key = "inbox/acme/org/acme/user/alice/Quarterly plan.md"
    text = b"# Quarterly plan\n\nThe Apollo launch moves to March because the supplier is late.\n"
    etag = s3.put_object(Bucket=bucket, Key=key, Body=text)["ETag"].strip('"')
    event = event_file(
        "sqs_inbox_object_created.json", BUCKET=bucket, OBJECT_KEY=key.replace(" ", "+"), SIZE=str(len(text)), ETAG=etag
    )
    for _ in range(2):  # SQS delivers at least once: the second delivery changes nothing
        assert invoke(stack.handlers["WorkerFunction"], "worker", event) == {"batchItemFailures": []}
    found = call(
        stack, "knowledge_search", {"query": "Apollo launch supplier", "mode": "bm25", "k": 5}, stack.keys.agent
    )["structuredContent"]["results"]
    titles = [r["document"]["title"] if isinstance(r.get("document"), dict) else r.get("title") for r in found]
    assert sum(1 for t in titles if t == "Quarterly plan.md") == 1, found


def test_worker_drops_what_cannot_succeed_and_retries_the_rest(stack: Stack) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    bucket = stack.engram.settings.bucket
    key = "inbox/acme/org/acme/broken.pdf"
    etag = s3.put_object(Bucket=bucket, Key=key, Body=b"%PDF-1.7 this is not a pdf")["ETag"].strip('"')
    corrupt = event_file("sqs_inbox_object_created.json", BUCKET=bucket, OBJECT_KEY=key, SIZE="26", ETAG=etag)
    garbled = {"Records": [{"messageId": "m-2", "body": "{not json"}]}
    assert invoke(stack.handlers["WorkerFunction"], "worker", corrupt) == {"batchItemFailures": []}
    assert invoke(stack.handlers["WorkerFunction"], "worker", garbled) == {
        "batchItemFailures": [{"itemIdentifier": "m-2"}]
    }
    assert not any(i.data.get("filename") == "broken.pdf" for i in stack.engram.records.query("acme", "document").items)


def test_progress_streams_through_the_gateway(stack: Stack) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "rag_ask",
            "arguments": {"question": "what is the return window"},
            "_meta": {"progressToken": "p1"},
        },
    }
    answer = stack.api.request("POST", "/mcp", body, stack.keys.agent, MCP_HEADERS)
    assert answer.status == 200 and answer.headers["content-type"].startswith("text/event-stream")
    assert b'"id":7' in answer.body.replace(b" ", b"")


def test_oversize_requests_are_refused_before_any_work(stack: Stack) -> None:
    big = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "document_upload", "arguments": {"bytes_base64": "A" * 6_100_000}},
    }
    answer = stack.api.request("POST", "/mcp", big, stack.keys.management, MCP_HEADERS)
    assert answer.status == 413 and answer.json()["error"]["status"] == 413


def test_a_failing_family_function_is_a_jsonrpc_error(stack: Stack, tmp_path: Path) -> None:
    def broken(function: str, event: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("Lambda is down")

    gateway = gateway_handler(build(Settings(embedder="none")), broken)
    event = event_file("mcp_initialize.json", KEY=stack.keys.agent)
    event["body"] = json.dumps(
        {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "memory_profile", "arguments": {}}}
    )
    answer = invoke(gateway, "gateway", event)
    assert json.loads(answer["body"]) == {
        "jsonrpc": "2.0",
        "id": 9,
        "error": {"code": -32603, "message": "the memory function failed; see its logs"},
    }


def test_the_gateway_module_as_deployed_answers_initialize(stack: Stack) -> None:
    from tests.aws_lambda.conftest import load_function

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", boto3.client("s3", region_name="us-east-1").meta.endpoint_url)
        gateway = load_function("gateway").handler  # functions/gateway/app.py: Lambda Invoke via boto3
    event = event_file("mcp_initialize.json", KEY=stack.keys.agent)
    answer = invoke(gateway, "gateway", event)
    assert answer["statusCode"] == 200 and json.loads(answer["body"])["result"]["serverInfo"]["name"] == "engram"


def test_the_schedule_resends_a_job_whose_message_was_lost(stack: Stack) -> None:
    """A job is a record committed with its write, then an SQS message. When the message is lost (a crash
    between the two), the worker's schedule ({"engram": "recover"}, template.yaml) sends it again."""
    import base64

    from engram.kernel.ports import Write, scan
    from engram.kernel.queue import JOBS

    up = call(
        stack,
        "document_upload",
        {"bytes_base64": base64.b64encode(b"The pump station needs new valves.").decode(), "title": "Pumps"},
        stack.keys.management,
    )["structuredContent"]
    boto3.client("sqs", region_name="us-east-1").purge_queue(QueueUrl=stack.queue_url)  # the message is lost
    records = stack.engram.records
    [job] = [j for j in scan(records, JOBS, "job") if j.data["payload"].get("document_id") == up["id"]]
    old = "2020-01-01T00:00:00Z"  # as if the process had died long ago
    records.transact(
        [Write(JOBS, "job", job.id, dict(job.data, due=old, queued_at=old), "t", job.version)], job.created_at
    )
    assert invoke(stack.handlers["WorkerFunction"], "worker", {"engram": "recover"}) == {"recovered": 1}
    assert all(a["batchItemFailures"] == [] for a in stack.drain())
    assert call(stack, "document_get", {"id": up["id"]}, stack.keys.agent)["structuredContent"]["status"] == "indexed"
    assert [j.id for j in scan(records, JOBS, "job") if j.id == job.id] == []  # done: its record is gone


def test_a_write_whose_job_message_cannot_be_sent_is_done_and_recovered(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS failing after the commit made the upload answer 503 after its document was committed, and the
    writer then deleted the file the committed document names. Now the write answers, its file stays, and the
    schedule's recovery sends the job from its record."""
    from engram.families.knowledge.documents import NewDocument
    from engram.kernel.caller import ANY

    e = stack.engram
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    sqs = e.queue._sqs  # type: ignore[attr-defined]
    send = sqs.send_message

    def down(**kwargs: object) -> object:
        raise ConnectionError("SQS is unreachable")

    monkeypatch.setattr(sqs, "send_message", down)
    doc = e.documents.ingest(caller, NewDocument(b"The sluice gate needs new hinges.", "Sluice"))
    monkeypatch.setattr(sqs, "send_message", send)
    item = e.records.get("acme", "document", doc["id"])
    assert item is not None and e.blobs.get(item.data["blob_key"]) == b"The sluice gate needs new hinges."
    assert stack.drain() == []  # no message went
    assert e.queue.recover(older_than=timedelta(0)) >= 2  # its embedding and graph jobs, from their records
    assert all(a["batchItemFailures"] == [] for a in stack.drain())
    assert e.documents.get(caller, doc["id"])["status"] == "indexed"


def test_every_function_writes_the_audit_trail_management_reads_it(stack: Stack) -> None:
    """Issue #27 on the Lambda path: the memory and knowledge functions append to the context's log in
    DynamoDB; the identity function answers `audit_query` and `audit_verify` from it."""
    stored = call(stack, "memory_store", {"content": "I keep a red bicycle in the hall."}, stack.keys.agent)
    turn = stored["structuredContent"]["turn_id"]
    assert call(stack, "document_get", {"id": "no-such-document"}, stack.keys.agent)["isError"]
    page = call(stack, "audit_query", {"limit": 20}, stack.keys.management)
    entries = page["structuredContent"]["entries"]
    tools = {e["tool"]: e for e in reversed(entries)}  # newest first: this test's call of each tool wins
    assert turn in tools["memory_store"]["objects"] and tools["memory_store"]["outcome"] == "ok"
    assert (tools["document_get"]["outcome"], tools["document_get"]["code"]) == ("error", "not_found")
    assert call(stack, "audit_verify", {}, stack.keys.management)["structuredContent"]["ok"]
    rest = stack.api.request("GET", "/api/v1/acme/audit?tool=memory_store&limit=1", None, stack.keys.management)
    assert rest.status == 200, rest.body
    [newest] = rest.json()["entries"]  # the stack is shared: other tests stored memories before this one
    assert newest["tool"] == "memory_store" and turn in newest["objects"]
    assert stack.engram.audit_log is not None
    assert any(e.data["tool"] == "memory_store" for e in stack.engram.audit_log.entries("acme"))  # in DynamoDB
    assert b"bicycle" not in json.dumps([e.data for e in stack.engram.audit_log.entries("acme")]).encode()


def test_an_erasure_through_the_functions_and_the_worker(stack: Stack) -> None:
    """Issue #27 on the Lambda path: the identity function takes the request, the worker runs the erasure job
    from SQS, DynamoDB, S3 and OpenSearch end up without the subject, and the receipt verifies against the key
    the well-known route publishes (without a key)."""
    from engram.trust.receipts import verify

    who = "org/acme/user/lambda-erased"
    stack.engram.identity.register_scopes("acme", [who])
    mine = call(stack, "memory_store", {"content": "My hamster is called Quasimodo.", "scopes": [[who]]},
                stack.keys.agent)  # fmt: skip
    turn = mine["structuredContent"]["turn_id"]
    preview = call(stack, "erasure_request", {"scope": who, "preview": True}, stack.keys.management)
    assert preview["structuredContent"]["found"]["memory"]["records"]["turn"] == 1
    asked = call(stack, "erasure_request", {"scope": who}, stack.keys.management)
    request_id = asked["structuredContent"]["request_id"]
    stack.drain()  # the worker function runs the job SQS carries
    state = call(stack, "erasure_status", {"request_id": request_id}, stack.keys.management)["structuredContent"]
    assert state["status"] == "done", state
    key = stack.api.request("GET", "/.well-known/engram-receipt-key", None, None)
    assert key.status == 200, key.body
    assert verify(state["receipt"], key.json()["public_key"]) == (True, "signature valid")
    assert stack.engram.records.get("acme", "turn", turn) is None
    assert stack.engram.records.history("acme", "turn", turn) == []
    checked = call(stack, "erasure_verify", {"request_id": request_id}, stack.keys.management)
    assert checked["structuredContent"]["clean"] and checked["structuredContent"]["receipt_valid"]


def test_an_erasure_out_of_time_hands_its_rest_over_and_the_receipt_counts_every_run(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker function stops at its time limit (90 s): an erasure too big for one invocation used to be cut off
    mid-family (its counts lost) and retried only when SQS showed the message again. Now a run that is short of
    time stops after the unit it finished, saves, and queues its own continuation; the receipt counts what every
    run erased, as the preview found it."""
    import engram.trust.erasure
    from tests.contract.test_erasure import summed

    who = "org/acme/user/lambda-long"
    stack.engram.identity.register_scopes("acme", [who])
    turns = [{"content": f"Note {n}: the okapi ate {n} leaves.", "session_id": "s1"} for n in range(7)]
    assert not call(stack, "memory_store_batch", {"turns": turns, "scopes": [[who]]}, stack.keys.agent).get("isError")
    stack.drain()
    monkeypatch.setattr(engram.trust.erasure, "BATCH", 2)  # units of two turns
    preview = call(stack, "erasure_request", {"scope": who, "preview": True}, stack.keys.management)
    found = preview["structuredContent"]["found"]
    assert found["memory"]["records"]["turn"] == 7
    asked = call(stack, "erasure_request", {"scope": who}, stack.keys.management)
    request_id = asked["structuredContent"]["request_id"]
    runs = stack.drain(remaining_ms=30_000)  # no time to spare: each run hands over after one unit
    state = call(stack, "erasure_status", {"request_id": request_id}, stack.keys.management)["structuredContent"]
    assert state["status"] == "done", state
    assert len(runs) >= 4 and all(r == {"batchItemFailures": []} for r in runs)  # one unit a run, none failed
    assert state["erased"] == summed(found)
    assert [t for t in stack.engram.records.query("acme", "turn").items if who in t.data["scopes"]] == []


def test_a_large_documents_embedding_out_of_time_goes_on_in_its_own_job(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the worker function (90 s, one vCPU) a document of a few thousand chunks takes longer to embed than one
    invocation may run: the job was cut off at the limit every time and never kept a vector. Now a run short of
    time indexes the chunks it embedded and queues the rest; here each run has time for one slice of 8."""
    from engram.families.knowledge import embedding
    from engram.families.knowledge.base import chunk_ids, chunk_prefix

    monkeypatch.setattr(embedding, "EMBED_SLICE", 8)
    words = ["okapi", "quokka", "narwhal", "axolotl", "pangolin", "tapir", "dugong", "saiga"]
    paragraphs = [" ".join(f"{words[(n + i) % 8]}{n} grazes near river {i}." for i in range(40)) for n in range(30)]
    ingested = call(stack, "document_ingest", {"text": "\n\n".join(paragraphs), "title": "field notes"},
                    stack.keys.agent)["structuredContent"]  # fmt: skip
    doc = stack.engram.records.get("acme", "document", ingested["id"])
    assert doc is not None and int(doc.data["chunks"]) >= 24
    runs = stack.drain(remaining_ms=30_000)
    assert len(runs) >= 3 and all(r == {"batchItemFailures": []} for r in runs)
    ids = chunk_ids(chunk_prefix(doc.data), int(doc.data["chunks"]))
    assert sorted(stack.engram.index.vectors("acme", ids)) == ids  # every chunk with its vector
    state = stack.engram.records.get("acme", "docstate", ingested["id"])
    assert state is not None and (state.data["status"], state.data["stage"]) == ("indexed", "vectors")
    found = call(stack, "knowledge_search", {"query": "axolotl29 grazes", "mode": "vector", "k": 3}, stack.keys.agent)
    assert found["structuredContent"]["results"], found


def test_oauth_tokens_pass_the_authorizer_and_a_401_points_to_the_metadata(stack: Stack) -> None:
    """Issue #28 on the Lambda path: the authorizer validates a JWT against the issuer's JWKS (fetched over
    HTTP from an authorization server the test starts), the functions run the call as the token's principal,
    a bad token is a 401 whose challenge names the protected resource metadata, served without a key."""
    from tests.oauth_server import running_auth_server

    base = "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com"  # the recorded events' domain name
    with running_auth_server() as server:
        policy = {"issuer": server.issuer, "audience": [f"{base}/mcp"], "grant": ["org/acme/user"]}
        stack.engram.identity.trust_issuer(None, policy, "acme")
        try:
            token = server.mint(aud=f"{base}/mcp", scope="engram:agent engram:grant:org/acme/user/alice")
            who = call(stack, "current_identity", {}, token)["structuredContent"]
            assert who["key_id"].startswith("tok_") and who["grant"] == ["org/acme/user/alice"]
            stored = call(stack, "memory_store", {"content": "Alice prefers window seats."}, token, "/mcp/memory")
            assert not stored.get("isError"), stored
            for bad in (server.mint(aud="https://elsewhere.example/mcp"), server.mint(alg="none", aud=f"{base}/mcp")):
                answer = rpc(stack, "/mcp", "tools/list", {}, bad)
                assert answer.status == 401
                challenge = answer.headers["www-authenticate"]
                assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
                assert 'error="invalid_token"' in challenge
            meta = stack.api.request("GET", "/.well-known/oauth-protected-resource/mcp")
            assert meta.status == 200 and meta.json()["resource"] == f"{base}/mcp"
            assert server.issuer in meta.json()["authorization_servers"]
        finally:
            stack.engram.identity.issuers.remove("acme", server.issuer)


def test_quotas_costs_and_per_tool_metrics_on_the_lambda_path(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #28 through API Gateway, the authorizer and the family functions: a key's write quota answers 429
    with Retry-After (DynamoDB's conditional counters), each answer carries its cost (REST headers with
    DynamoDB's capacity units; MCP `_meta`), and each call is a CloudWatch embedded metric per family and tool."""
    ctx = "lambda-quota"
    agent, principal = stack.engram.identity.create_key([ctx], "agent", ["org/lq"])
    manager, _ = stack.engram.identity.create_key([ctx], "management", ["org/lq"])
    limits = {"key_id": principal.key_id, "writes_per_day": 2}
    assert stack.api.request("POST", f"/api/v1/{ctx}/quotas", limits, manager).status == 200
    capsys.readouterr()
    answers = [
        stack.api.request("POST", f"/api/v1/{ctx}/facts", {"content": f"Lambda quota probe {i}: I like figs."}, agent)
        for i in range(4)
    ]
    assert [a.status for a in answers] == [200, 200, 429, 429]
    assert 0 < int(answers[2].headers["retry-after"]) <= 86_401
    assert answers[2].json()["error"]["code"] == "quota_exceeded"
    cost = dict(part.split("=") for part in answers[0].headers["x-engram-cost"].split(", "))
    assert int(cost["store-writes"]) >= 1 and float(cost["write-units"]) > 0 and int(cost["embeddings"]) >= 1
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    per_tool = [m for m in emitted if m.get("tool") == "memory_store" and "Latency" in m]
    assert len(per_tool) == 4 and all(m["family"] == "memory" for m in per_tool)
    assert sum(m["Errors"][0] for m in per_tool) == 2 and sum(m["Calls"][0] for m in per_tool) == 4
    declared = per_tool[0]["_aws"]["CloudWatchMetrics"][0]
    assert declared["Namespace"] == "Engram" and ["family", "tool"] in declared["Dimensions"]
    recalled = call(stack, "memory_recall", {"query": "figs", "context_id": ctx}, agent)
    spent = recalled["_meta"]["io.engram/cost"]
    assert spent["opensearch_requests"] >= 1 and spent["embeddings"] == 1, spent


def test_an_answer_over_what_lambda_returns_is_a_413_naming_what_to_ask(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lambda fails an invocation whose answer is over 6 MB, and API Gateway answers 500 with none of Engram's
    body. An answer that fits over REST travels twice over MCP (text and structured content): past the limit, it
    is now Engram's own 413 `response_too_large`, a tool error naming what to ask. (The limit scaled down by 10
    here, in the functions and in the test gateway alike, to write 11 long messages instead of 110.)"""
    from engram.api import lambda_runtime
    from tests.aws_lambda import apigw

    monkeypatch.setattr(lambda_runtime, "RESPONSE_BYTES", lambda_runtime.RESPONSE_BYTES // 10)
    monkeypatch.setattr(apigw, "LAMBDA_RESPONSE_BYTES", apigw.LAMBDA_RESPONSE_BYTES // 10)
    for i in range(11):
        message = {"thread_id": "long-thread", "role": "user", "content": f"Note {i}. " + "x" * 30_000}
        assert stack.api.request("POST", "/api/v1/acme/threads/messages", message, stack.keys.agent).status == 200
    path = "/api/v1/acme/threads/messages?thread_id=long-thread&limit=200"
    rest = stack.api.request("GET", path, None, stack.keys.agent)
    assert rest.status == 200 and len(rest.json()["messages"]) == 11, rest.body[:300]
    over = call(stack, "conversation_history", {"thread_id": "long-thread", "limit": 200}, stack.keys.agent)
    error = over["structuredContent"]["error"]
    assert over["isError"] and (error["status"], error["code"]) == (413, "response_too_large")
    assert "limit" in error["message"]
    short = call(stack, "conversation_history", {"thread_id": "long-thread", "limit": 5}, stack.keys.agent)
    assert len(short["structuredContent"]["messages"]) == 5


def test_the_gateway_serves_the_console_without_a_key(stack: Stack) -> None:
    """#52: the console's files come from the gateway function at the API's own domain (template routes with no
    authorizer), with their security headers; the API behind them still wants a key."""
    moved = stack.api.request("GET", "/console")
    assert moved.status == 308 and moved.headers["location"] == "/console/index.html"
    page = stack.api.request("GET", "/console/index.html")
    assert page.status == 200 and b'<script type="module"' in page.body
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    script = next(
        part for part in page.body.decode().split('"') if part.startswith("/console/assets/") and part.endswith(".js")
    )
    assert stack.api.request("GET", script).status == 200
    assert stack.api.request("GET", "/api/v1/acme/identity").status == 401
