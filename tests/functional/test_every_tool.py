"""Every registered operation, over MCP and REST: minimal valid call, unknown argument, other tenant,
wrong principal. New operations must add a sample call below or this test fails."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from engram.operations.registry import select
from tests.conftest import Live
from tests.functional.mcpclient import connect

SAMPLES: dict[str, dict[str, Any]] = {
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
}
OPS = select()


def key_for(live: Live, op_name: str) -> str:
    op = next(o for o in OPS if o.name == op_name)
    return live.keys.agent if "agent" in op.principals else live.keys.management


def test_every_operation_has_a_sample() -> None:
    assert {op.name for op in OPS} == set(SAMPLES)


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
async def test_mcp_every_tool(live: Live, op: Any) -> None:
    args = SAMPLES[op.name]
    async with connect(live.url, key_for(live, op.name)) as c:
        ok = await c.call_tool(op.name, args)
        assert not ok.is_error, ok
        with pytest.raises(MCPError) as e:
            await c.call_tool(op.name, {**args, "unexpected_argument": 1})
        assert e.value.error.code == -32602
        other = await c.call_tool(op.name, {**args, "context_id": "globex"})
        assert other.is_error and other.structured_content is not None
        assert other.structured_content["error"]["status"] == 401
    async with connect(live.url, live.keys.other_tenant) as c:
        cross = await c.call_tool(op.name, {**args, "context_id": "acme"})
        assert cross.is_error and cross.structured_content is not None
        assert cross.structured_content["error"]["status"] == 401


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_rest_every_route(live: Live, op: Any) -> None:
    args = SAMPLES[op.name]
    url = f"{live.url}/api/v1/acme{op.path}"
    h = {"Authorization": f"Bearer {key_for(live, op.name)}"}

    def send(body: dict[str, Any], headers: dict[str, str], target: str = url) -> httpx.Response:
        if op.method == "GET":
            return httpx.get(target, params=body, headers=headers)
        return httpx.post(target, json=body, headers=headers)

    assert send(args, h).status_code == 200
    assert send({**args, "unexpected_argument": "1"}, h).status_code == 400
    assert send(args, h, f"{live.url}/api/v1/globex{op.path}").status_code == 401
    assert send(args, {}).status_code == 401
    if not {"supervisor", "agent"} & set(op.principals):
        denied = send(args, {"Authorization": f"Bearer {live.keys.agent}"})
        assert denied.status_code == 403
    elif "supervisor" not in op.principals:
        denied = send(args, {"Authorization": f"Bearer {live.keys.supervisor}"})
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "principal_not_allowed"
