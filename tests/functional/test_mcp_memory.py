"""The memory family over MCP: a real SDK client against the live HTTP server, both protocol eras."""

from __future__ import annotations

import uuid

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import Live
from tests.functional.mcpclient import connect, post_tool_call

ALICE = [["org/acme/user/alice"]]
MEMORY_TOOLS = {
    "memory_store",
    "memory_store_batch",
    "memory_recall",
    "memory_reflect",
    "memory_profile",
    "memory_forget",
    "memory_timeline",
    "recall",
    "explain",
    "predict",
    "list-projects",
    "list-sessions",
    "reconstruct",
}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_both_protocol_eras_list_and_call(live: Live, mode: str) -> None:
    async with connect(live.url, live.keys.agent, mode) as c:
        assert c.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        names = {t.name for t in (await c.list_tools()).tools}
        assert names >= MEMORY_TOOLS
        r = await c.call_tool("memory_store", {"content": "My favorite color is teal.", "scopes": ALICE})
        assert not r.is_error and r.structured_content is not None
        assert r.structured_content["attributes"][0]["key"] == "favorite_color"


async def test_family_endpoint_serves_only_its_family(live: Live) -> None:
    async with connect(live.url, live.keys.agent, path="/mcp/memory") as c:
        tools = (await c.list_tools()).tools
        # a key with one context: no tool advertises context_id, and a call that passes it still works
        assert not any("context_id" in t.input_schema["properties"] for t in tools)
        named = await c.call_tool("memory_recall", {"query": "anything", "context_id": "acme"})
        assert not named.is_error
    assert {t.name for t in tools} == MEMORY_TOOLS


async def test_store_supersede_recall_as_of_and_profile(live: Live) -> None:
    session = f"s-{uuid.uuid4().hex[:8]}"
    async with connect(live.url, live.keys.agent) as c:
        first = await c.call_tool(
            "memory_store",
            {
                "content": "I live in Lisbon and I work at Initech.",
                "scopes": ALICE,
                "session_id": session,
                "said_at": "2025-01-10T09:00:00Z",
            },
        )
        assert first.structured_content is not None
        actions = {a["key"]: a["action"] for a in first.structured_content["attributes"]}
        assert actions["location"] in ("created", "superseded")
        second = await c.call_tool(
            "memory_store",
            {
                "content": "Actually, I moved to Porto.",
                "scopes": ALICE,
                "session_id": session,
                "said_at": "2025-03-01T09:00:00Z",
            },
        )
        sc = second.structured_content
        assert sc is not None
        assert sc["attributes"] == [
            {"key": "location", "value": "Porto", "category": "identity", "action": "superseded", "previous": "Lisbon"}
        ]
        assert sc["corrections"] == [{"key": "location", "old": "Lisbon", "new": "Porto"}]
        assert sc["traceId"] and sc["turn_id"].startswith("turn:")

        now = await c.call_tool("memory_recall", {"query": "where does alice live", "lens": ALICE, "k": 20})
        nc = now.structured_content
        assert nc is not None and nc["tier"] in ("direct", "hybrid", "full_context")
        current = [r["text"] for r in nc["results"] if r["kind"] == "attribute" and "location" in r["text"]]
        assert "alice location: Porto" in current and "alice location: Lisbon" not in current

        past = await c.call_tool(
            "memory_recall", {"query": "where does alice live", "lens": ALICE, "k": 20, "as_of": "2025-02-01T00:00:00Z"}
        )
        assert past.structured_content is not None
        texts = [r["text"] for r in past.structured_content["results"] if r["kind"] == "attribute"]
        assert "alice location: Lisbon" in texts and "alice location: Porto" not in texts

        again = await c.call_tool("memory_recall", {"query": "where does alice live", "lens": ALICE, "k": 20})
        assert again.structured_content is not None and again.structured_content["tier"] == "cache"

        prof = await c.call_tool("memory_profile", {"scopes": ALICE})
        assert prof.structured_content is not None
        static = {s["key"]: s["value"] for s in prof.structured_content["static"]}
        assert static["location"] == "Porto" and static["employer"] == "Initech"

        # Spectron's memory_profile example: what the user is doing now is a dynamic entry
        await c.call_tool("memory_store", {"content": "I'm currently leading the Q3 roadmap review.", "scopes": ALICE})
        prof = await c.call_tool("memory_profile", {"scopes": ALICE})
        assert prof.structured_content is not None
        dynamic = {s["key"]: s["value"] for s in prof.structured_content["dynamic"]}
        assert dynamic["current_task"] == "Q3 roadmap review"  # as the seed's example shows it


async def test_instructions_preferences_and_forget(live: Live) -> None:
    bob = [["org/acme/user/bob"]]
    async with connect(live.url, live.keys.agent) as c:
        r = await c.call_tool("memory_store", {"content": "Always answer concisely. I love sailing.", "scopes": bob})
        assert r.structured_content is not None
        assert r.structured_content["instructions"][0]["label"] == "length"
        prof = (await c.call_tool("memory_profile", {"scopes": bob})).structured_content
        assert prof is not None
        assert prof["instructions"] == [{"label": "length", "description": "always answer concisely"}]
        assert {"key": "likes", "value": "sailing"}.items() <= prof["preferences"][0].items()

        gone = await c.call_tool("memory_forget", {"query": "sailing", "scopes": bob})
        assert gone.structured_content is not None and gone.structured_content["deleted"] == 1
        prof = (await c.call_tool("memory_profile", {"scopes": bob})).structured_content
        assert prof is not None and prof["preferences"] == []
        # nothing is physically deleted: the attribute keeps its history with valid_until set
        attr_id = gone.structured_content["ids"][0]
        hist = live.engram.records.history("acme", "attribute", attr_id)
        assert [h.data["status"] for h in hist] == ["current", "forgotten"]


async def test_reflect_persist_needs_supervisor(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        for text in (
            "The billing page confused me again.",
            "Billing emails arrive twice.",
            "I was charged twice, billing is broken.",
        ):
            await c.call_tool("memory_store", {"content": text, "scopes": [["org/acme/project/apollo"]]})
        r = await c.call_tool("memory_reflect", {"query": "recurring complaints", "persist": True})
        assert r.is_error and r.structured_content == {
            "error": {
                "status": 403,
                "code": "principal_not_allowed",
                "message": "memory_reflect with persist=true needs principal supervisor or management",
                "details": {},
            }
        }
        plain = await c.call_tool("memory_reflect", {"query": "billing complaints"})
        assert plain.structured_content is not None and plain.structured_content["evidence"]
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with connect(live.url, live.keys.supervisor) as c:
        r = await c.call_tool(
            "memory_reflect",
            {"query": "what keeps going wrong", "persist": True, "lens": [["org/acme/project/apollo"]]},
            progress_callback=on_progress,
        )
        assert not r.is_error and r.structured_content is not None
        persisted = r.structured_content["persisted_attributes"]
        assert persisted and all(p["category"] == "experiential" for p in persisted)
        assert "billing" in r.structured_content["reflection"]
    assert progress and progress[-1] == 3


async def test_protocol_faults_are_jsonrpc_errors(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        with pytest.raises(MCPError) as e:
            await c.call_tool("memory_recall", {"query": "x", "k": 101})
        assert e.value.error.code == -32602 and "k" in e.value.error.message
        with pytest.raises(MCPError) as e:
            await c.call_tool("memory_store", {"content": "x", "bogus": 1})
        assert e.value.error.code == -32602 and "bogus" in e.value.error.message
        with pytest.raises(MCPError) as e:
            await c.call_tool("memory_store", {})
        assert e.value.error.code == -32602
        with pytest.raises(MCPError) as e:
            await c.call_tool("no_such_tool", {})
        assert e.value.error.code == -32601
        with pytest.raises(MCPError):
            await c.call_tool("memory_store", {"content": "x" * 40_000})
        # the server is still up and answers
        assert not (await c.call_tool("memory_recall", {"query": "teal"})).is_error


async def test_operation_failures_are_tool_errors(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        other = await c.call_tool("memory_recall", {"query": "x", "context_id": "globex"})
        assert other.is_error and other.structured_content is not None
        assert other.structured_content["error"]["status"] == 401  # masked: not 404, not 403
        outside = await c.call_tool("memory_store", {"content": "hi", "scopes": [["org/globex"]]})
        assert outside.structured_content is not None
        assert outside.structured_content["error"]["status"] in (400, 403)
        unregistered = await c.call_tool("memory_store", {"content": "hi", "scopes": [["org/acme/user/zed"]]})
        assert unregistered.structured_content is not None
        assert unregistered.structured_content["error"]["code"] == "scope_not_registered"
        with pytest.raises(MCPError) as e:
            await c.call_tool("memory_store", {"content": "hi", "said_at": "yesterday"})
        assert e.value.error.code == -32602 and "said_at" in e.value.error.message
    async with connect(live.url, live.keys.supervisor) as c:
        denied = await c.call_tool("memory_store", {"content": "I live in Oslo."})
        assert denied.structured_content is not None and denied.structured_content["error"]["status"] == 403


async def test_other_tenant_sees_nothing(live: Live) -> None:
    async with connect(live.url, live.keys.other_tenant) as c:
        r = await c.call_tool("memory_recall", {"query": "where does alice live", "k": 50})
        assert r.structured_content is not None
        assert r.structured_content["results"] == []


def test_missing_revoked_and_bad_keys_get_401(live: Live) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    for key in (None, "sk-nope", live.keys.revoked, "Basic abc"):
        h = dict(headers, **({"Authorization": f"Bearer {key}"} if key else {}))
        r = httpx.post(live.url + "/mcp", json=body, headers=h)
        assert r.status_code == 401 and r.json()["error"]["status"] == 401
        assert r.headers["www-authenticate"].startswith("Bearer")


def test_dns_rebinding_guard_and_charset_content_type(live: Live) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    h = {"Authorization": f"Bearer {live.keys.agent}", "Accept": "application/json, text/event-stream"}
    evil = httpx.post(live.url + "/mcp", json=init, headers=dict(h, Host="evil.example"))
    assert evil.status_code == 421
    ok = httpx.post(
        live.url + "/mcp",
        content=httpx.Request("POST", "/", json=init).content,
        headers=dict(h, **{"Content-Type": "application/json; charset=utf-8"}),
    )
    assert ok.status_code == 200


def test_oversize_body_is_413(live: Live) -> None:
    r = post_tool_call(live.url, live.keys.agent, "memory_store", {"content": "x" * 300_000})
    assert r.status_code == 413


def test_plain_calls_get_json_and_progress_requests_get_a_stream(live: Live) -> None:
    h = {"Authorization": f"Bearer {live.keys.agent}", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "memory_reflect", "arguments": {"query": "billing"}}}  # fmt: skip
    plain = httpx.post(live.url + "/mcp", json=call, headers=h)
    assert plain.headers["content-type"].startswith("application/json") and plain.json()["result"]
    call["params"]["_meta"] = {"progressToken": "p1"}  # type: ignore[index]
    streamed = httpx.post(live.url + "/mcp", json=call, headers=h)
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert '"notifications/progress"' in streamed.text and '"progressToken":"p1"' in streamed.text.replace(" ", "")


def test_an_argument_that_says_progress_token_asks_for_no_stream(live: Live) -> None:
    """Only a request's `_meta` asks for progress (or, in 2026's requests, for log notifications): a tool's argument
    that happens to name either — a query, a path, a fuzzer's string — gets plain JSON (it got a stream)."""
    h = {"Authorization": f"Bearer {live.keys.agent}", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    for words in ("progressToken", "io.modelcontextprotocol/logLevel", '{"_meta": {"progressToken": 1}}'):
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "memory_reflect", "arguments": {"query": words}}}  # fmt: skip
        plain = httpx.post(live.url + "/mcp", json=call, headers=h)
        assert plain.headers["content-type"].startswith("application/json"), words
        assert plain.json()["result"], words
    batch_or_not = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "memory_reflect", "arguments": {"query": "progressToken"},
                               "_meta": {"progressToken": "p2"}}}  # fmt: skip
    streamed = httpx.post(live.url + "/mcp", json=batch_or_not, headers=h)
    assert streamed.headers["content-type"].startswith("text/event-stream")


async def test_context_header_picks_the_context_when_a_call_names_none(live: Live) -> None:
    ident = live.engram.identity
    key, _ = ident.create_key(["acme", "globex"], "agent", ["org"])
    async with connect(live.url, key) as c:
        plain = await c.call_tool("current_identity", {})
        assert plain.structured_content is not None and plain.structured_content["error"]["status"] == 400
        listed = (await c.list_tools()).tools  # two contexts: every tool says it takes one
        assert all("context_id" in t.input_schema["properties"] for t in listed)
    headers = {"X-Spectron-Context": "globex"}
    async with connect(live.url, key, extra_headers=headers) as c:
        listed = (await c.list_tools()).tools  # the request names its context: the catalogue leaves it out
        assert listed and not any("context_id" in t.input_schema["properties"] for t in listed)
        r = await c.call_tool("current_identity", {})
        assert r.structured_content is not None and r.structured_content["context_id"] == "globex"
        named = await c.call_tool("current_identity", {"context_id": "acme"})  # the argument wins
        assert named.structured_content is not None and named.structured_content["context_id"] == "acme"
