"""The MCP fast path (engram.api.mcp_fast) answers what the SDK answers: the same requests — successes, tool
errors in every seed's dialect, unknown tools, bad arguments, and what the SDK's checks refuse (Accept,
Content-Type, Host, Origin, protocol versions, shapes) — sent to the live server and to a second server on the
same data with the fast path off get the same status and the same JSON-RPC message (per-call figures aside:
cost, timings, timestamps); and the fast path answered the plain calls itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engram.api import mcp_fast
from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.settings import Settings
from engram.wiring import build_local
from tests.conftest import Live

BASE = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
V2025 = {"MCP-Protocol-Version": "2025-11-25"}
VARYING = {"queryMs", "query_ms", "timestamp", "traceId", "io.engram/cost", "server_ms", "took_ms"}


def call(name: str, arguments: Any, id_: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


# (label, body, extra headers, whether the fast path answers it)
CASES: list[tuple[str, Any, dict[str, str], bool]] = [
    ("identity", call("current_identity", {}), V2025, True),
    ("no version header", call("current_identity", {}), {}, True),
    ("string id", call("current_identity", {}, "abc"), V2025, True),
    ("context get, missing", call("context_get", {"key": "nowhere"}), V2025, True),
    ("memory recall", call("memory_recall", {"query": "favourite colour"}), V2025, True),
    ("knowledge search", call("knowledge_search", {"query": "wing flutter"}), V2025, True),
    ("agrama error", call("read_code", {"path": "../etc/passwd"}), V2025, True),
    ("agrama no file", call("analyze_dependencies", {"file_path": "none.py"}), V2025, True),
    ("causantic error", call("reconstruct", {"session_id": "nope"}), V2025, True),
    ("bad arguments", call("memory_recall", {"query": ""}), V2025, True),
    ("unexpected argument", call("current_identity", {"x": 1}), V2025, True),
    ("unknown tool", call("no_such_tool", {}), V2025, True),
    ("management tool for an agent", call("quota_get", {}), V2025, True),
    ("arguments not an object", call("current_identity", [1, 2]), V2025, False),
    ("no name", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}, V2025, False),
    ("no params", {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}, V2025, False),
    ("notification", {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "current_identity"}}, V2025,
     False),
    ("batch", [call("current_identity", {})], V2025, False),
    ("progress token", {**call("current_identity", {}), "params": {"name": "current_identity", "arguments": {},
                                                                  "_meta": {"progressToken": 7}}}, V2025, False),
    ("tools/list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, V2025, False),
    ("unknown version", call("current_identity", {}), {"MCP-Protocol-Version": "1999-01-01"}, False),
    ("2026 version", call("current_identity", {}), {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                                                   "Mcp-Name": "current_identity"}, False),
    ("accepts no JSON", call("current_identity", {}), {**V2025, "Accept": "text/event-stream"}, False),
    ("not JSON content", call("current_identity", {}), {**V2025, "Content-Type": "text/plain"}, False),
    ("foreign host", call("current_identity", {}), {**V2025, "Host": "evil.example"}, False),
    ("foreign origin", call("current_identity", {}), {**V2025, "Origin": "http://evil.example"}, False),
]  # fmt: skip


def steady(node: Any) -> Any:
    """A message without what differs from call to call (JSON text in a text content parsed to compare)."""
    if isinstance(node, dict):
        return {k: steady(v) for k, v in node.items() if k not in VARYING}
    if isinstance(node, list):
        return [steady(v) for v in node]
    if isinstance(node, str) and node[:1] in "{[":
        try:
            return steady(json.loads(node))
        except ValueError:
            return node
    return node


def answer(http: httpx.Client, url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    r = http.post(url + "/mcp", content=json.dumps(body), headers={**BASE, **headers})
    text = r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        text = next((line[5:] for line in text.splitlines() if line.startswith("data:")), "")
    try:
        return r.status_code, steady(json.loads(text)) if text.strip() else None
    except ValueError:
        return r.status_code, text


@pytest.fixture(scope="module")
def agent(live: Live) -> str:
    """A key of this module's own (no log level another test set for a shared key streams its calls)."""
    key, _ = live.engram.identity.create_key(["acme"], "agent", ["org/acme"])
    return key


@pytest.fixture(scope="module")
def without(live: Live) -> Iterator[str]:
    """A second server on the live server's data, the fast path off: the SDK answers every call."""
    engram = build_local(
        Settings(data_dir=live.engram.settings.data_dir, mcp_fast_path=False, max_request_bytes=200_000)
    )
    with in_thread(create_app(engram)) as url:
        yield url


@pytest.mark.parametrize(("label", "body", "headers", "fast"), CASES, ids=[c[0] for c in CASES])
def test_the_fast_path_answers_as_the_sdk_does(
    live: Live,
    without: str,
    agent: str,
    monkeypatch: pytest.MonkeyPatch,
    label: str,
    body: Any,
    headers: dict[str, str],
    fast: bool,
) -> None:
    answered: list[bool] = []  # True when the fast path sent the answer (recorded before the client has it)
    original = mcp_fast.FastCall.answer

    async def spy(self: mcp_fast.FastCall, scope: Any, body: bytes, principal: Any, send: Any) -> bool:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                answered.append(True)
            await send(message)

        answered.append(False)  # called
        return await original(self, scope, body, principal, sending)

    monkeypatch.setattr(mcp_fast.FastCall, "answer", spy)
    with httpx.Client(headers={"Authorization": f"Bearer {agent}"}, timeout=60) as http:
        theirs = answer(http, without, body, headers)
        assert answered == []  # the other server has no fast path
        ours = answer(http, live.url, body, headers)
    assert ours == theirs, label
    assert any(answered) is fast, label


def _every_tool() -> list[str]:
    from engram.families import select

    return sorted({name for op in select() for name in op.names})


@pytest.fixture(scope="module")
def manager(live: Live) -> str:
    key, _ = live.engram.identity.create_key(["acme"], "management", ["org/acme"])
    return key


@pytest.mark.parametrize("role", ["agent", "management"])
@pytest.mark.parametrize("tool", _every_tool())
def test_every_tool_answers_the_same_through_both_paths(
    live: Live, without: str, agent: str, manager: str, monkeypatch: pytest.MonkeyPatch, tool: str, role: str
) -> None:
    """#55: the fast path is kept for its measured gain (#26), so every tool and seed alias runs through both —
    a call with an argument no tool takes (refused before any work, in the tool's seed dialect: nothing is
    written) by an agent and by a management key: the same status, the same message, and the fast path answered it
    itself."""
    answered: list[bool] = []
    original = mcp_fast.FastCall.answer

    async def spy(self: mcp_fast.FastCall, scope: Any, body: bytes, principal: Any, send: Any) -> bool:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                answered.append(True)
            await send(message)

        return await original(self, scope, body, principal, sending)

    monkeypatch.setattr(mcp_fast.FastCall, "answer", spy)
    body = call(tool, {"no_tool_takes_this": 1})
    key = agent if role == "agent" else manager
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        theirs = answer(http, without, body, V2025)
        ours = answer(http, live.url, body, V2025)
    assert ours == theirs, tool
    assert answered == [True], tool
    assert ours[0] == 200 and "no_tool_takes_this" in json.dumps(ours[1]), ours  # refused for the argument
