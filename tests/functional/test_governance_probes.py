"""What a management key governs, probed tool by tool over MCP (`IdentityService.governed`): a manager of one
region (Bob's) calls every management-only tool against what belongs to another region (Alice's) or to the whole
context, and is refused — 403, not found, or 409 `in_use`, as the tool's probe says — with nothing changed, while
the context's manager is answered. A management tool without a probe fails the first test, so the next one cannot
skip the question."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from engram.families import select
from tests.conftest import Live
from tests.fixtures.hostile import MCP_HEADERS, mcp_call

ISSUER = "https://issuer.example"  # the live server's settings allow it


@dataclass
class World:
    url: str
    ctx: str
    admin: str
    region: str
    alice_key_id: str
    admin_key_id: str
    request_id: str


def call(world: World, key: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's structured answer, or its error (`{"error": {...}}`)."""
    headers = {"Authorization": f"Bearer {key}", **MCP_HEADERS}
    answer = httpx.post(world.url + "/mcp", content=mcp_call(tool, {"context_id": world.ctx, **args}),
                        headers=headers, timeout=60)  # fmt: skip
    body = answer.json()
    assert answer.status_code == 200 and "result" in body, (tool, answer.text[:500])
    result = body["result"]
    out: dict[str, Any] = result.get("structuredContent") or json.loads(result["content"][0]["text"])
    return out


@pytest.fixture(scope="module")
def world(live: Live) -> World:
    ctx = f"g{uuid.uuid4().hex[:10]}"
    alice_path, bob_path = f"org/{ctx}/user/alice", f"org/{ctx}/user/bob"
    e = live.engram
    admin, admin_principal = e.identity.create_key([ctx], "management", [f"org/{ctx}"])
    region, _ = e.identity.create_key([ctx], "management", [bob_path])
    alice, alice_principal = e.identity.create_key([ctx], "agent", [alice_path])
    w = World(live.url, ctx, admin, region, alice_principal.key_id, admin_principal.key_id, "")
    schema = {"type": "object", "properties": {"title": {"type": "string"}}}
    assert call(w, admin, "schemas_create", {"type": "ticket", "jsonSchema": schema})["version"] == 1
    assert "id" in call(w, alice, "record_create", {"type": "ticket", "payload": {"title": "Alice's"}})
    assert call(w, admin, "oauth_trust", {"issuer": ISSUER, "audience": [f"{live.url}/mcp"], "grant": [alice_path]})
    asked = call(w, admin, "erasure_request", {"scope": f"{alice_path}/old"})
    w.request_id = asked["request_id"]
    e.queue.join()
    return w


@dataclass(frozen=True)
class Probe:
    args: Callable[[World], dict[str, Any]]
    refused: str  # the error code a manager of another region gets
    state: Callable[[World], Any] | None = None  # read by the context's manager before and after: unchanged


def _context_quotas(w: World) -> Any:
    return call(w, w.admin, "quota_get", {})


def _schema(w: World) -> Any:
    return call(w, w.admin, "list_schemas", {"type": "ticket"})


def _issuers(w: World) -> Any:
    return call(w, w.admin, "oauth_issuers", {})


def _records(w: World) -> Any:
    return call(w, w.admin, "record_query", {"type": "ticket", "field": "title", "op": "prefix", "value": ""})


PROBES: dict[str, Probe | str] = {
    "quota_set": Probe(lambda w: {"requests_per_minute": 0}, "grant_denied", _context_quotas),
    "quota_get": Probe(lambda w: {"key_id": w.alice_key_id}, "grant_denied"),
    "usage_report": Probe(lambda w: {"key_id": w.alice_key_id}, "grant_denied"),
    "schemas_create": Probe(
        lambda w: {"type": "ticket", "jsonSchema": {"type": "object", "required": ["x"]}}, "in_use", _schema
    ),
    "oauth_trust": Probe(
        lambda w: {"issuer": ISSUER, "audience": [f"{w.url}/mcp"], "grant": [f"org/{w.ctx}/user/bob"]},
        "in_use",
        _issuers,
    ),
    "oauth_distrust": Probe(lambda w: {"issuer": ISSUER}, "issuer_not_found", _issuers),
    "erasure_status": Probe(lambda w: {"request_id": w.request_id}, "not_found"),
    "erasure_verify": Probe(lambda w: {"request_id": w.request_id}, "not_found"),
    "erasure_request": Probe(lambda w: {"scope": f"org/{w.ctx}/user/alice", "preview": True}, "scope_not_granted"),
    "subject_export": Probe(lambda w: {"scope": f"org/{w.ctx}/user/alice"}, "scope_not_granted"),
    "scopes_create": Probe(lambda w: {"paths": [f"org/{w.ctx}/user/alice/new"]}, "grant_denied"),
    # the whole context moves only by its manager's hand: an export holds every region, an import writes into all
    "context_export": Probe(lambda w: {}, "not_context_manager", _records),
    "context_import": Probe(
        lambda w: {"bytes_base64": "H4sIAAAAAAAAA6uuBQBDv6ajAgAAAA=="}, "not_context_manager", _records
    ),
    "context_transfer_status": Probe(lambda w: {"transfer_id": "tx_0"}, "not_context_manager"),
    # reads whose answers hold another region's nothing, checked in their own way below
    "audit_query": "its entries: only the calls of keys it governs (test below)",
    "oauth_issuers": "only the issuers trusted inside its grant (the oauth_distrust probe reads it)",
    "audit_verify": "the chain's integrity: counts and sequence numbers, no key, object or call",
}


def test_every_management_tool_has_a_probe() -> None:
    management_only = {op.name for op in select() if set(op.principals) == {"management"}}
    assert management_only == set(PROBES), management_only ^ set(PROBES)


@pytest.mark.parametrize("tool", sorted(t for t, p in PROBES.items() if isinstance(p, Probe)))
def test_a_manager_of_another_region_is_refused_and_changes_nothing(world: World, tool: str) -> None:
    probe = PROBES[tool]
    assert isinstance(probe, Probe)
    before = probe.state(world) if probe.state else None
    answer = call(world, world.region, tool, probe.args(world))
    assert answer.get("error", {}).get("code") == probe.refused, answer
    if probe.state:
        assert probe.state(world) == before


def test_a_manager_of_another_region_sees_no_call_of_theirs(world: World) -> None:
    assert ISSUER not in [i["issuer"] for i in call(world, world.region, "oauth_issuers", {})["issuers"]]
    mine = call(world, world.region, "audit_query", {"limit": 500})["entries"]  # its own call just before, at least
    everyone = call(world, world.admin, "audit_query", {"limit": 500})["entries"]
    others = {world.admin_key_id, world.alice_key_id}  # the fixture's calls: the context's manager's, Alice's
    assert {e["key_id"] for e in everyone} >= others
    assert mine and not {e["key_id"] for e in mine} & others
