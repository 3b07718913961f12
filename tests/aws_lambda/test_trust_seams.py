"""Issue #49 on the Lambda path (API Gateway v2 events through the template's authorizer into the functions, over
moto and the OpenSearch node): ids and the audit trail hold no names, one context's manager reaches nothing of
another's, dates at the edge are precise errors."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.aws_lambda.conftest import Stack
from tests.aws_lambda.test_functions import call, rpc

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]


def test_entity_ids_urls_and_the_audit_trail_hold_no_name(stack: Stack) -> None:
    stored = call(stack, "memory_store", {"content": "My manager is Wilhelmina Quasthoff."}, stack.keys.agent)
    assert not stored.get("isError"), stored
    found = call(stack, "entity_query", {"name": "wilhelmina quasthoff"}, stack.keys.agent, "/mcp/entities")
    eid = found["structuredContent"]["entity"]["id"]
    assert eid.startswith("ent_") and "wilhelmina" not in eid.lower() and "quasthoff" not in eid.lower()
    rels = stack.api.request("GET", f"/api/v1/acme/entities/relationships?entity_id={eid}", None, stack.keys.agent)
    assert rels.status == 200 and rels.json()["relationships"][0]["type"] == "manager", rels.body
    [edge] = rels.json()["relationships"]
    assert "quasthoff" not in edge["id"].lower()  # the memory's edge too
    page = call(stack, "audit_query", {"limit": 50}, stack.keys.management)["structuredContent"]["entries"]
    assert any(e["tool"] == "entity_query" for e in page)
    assert stack.engram.audit_log is not None
    kept = json.dumps([e.data for e in stack.engram.audit_log.entries("acme")]).lower()
    assert "wilhelmina" not in kept and "quasthoff" not in kept and eid not in kept  # ids as keyed hashes


def test_a_manager_of_another_context_sets_no_quota_on_this_contexts_key(stack: Stack) -> None:
    agent = stack.engram.identity.authenticate(stack.keys.agent)
    answers = [
        stack.api.request(
            "POST", "/api/v1/globex/quotas", {"key_id": key_id, "writes_per_day": 0}, stack.keys.other_tenant
        )
        for key_id in (agent.key_id, "key_000000000000")
    ]
    assert [a.status for a in answers] == [403, 403] and answers[0].json() == answers[1].json(), answers[0].body
    got = stack.api.request("GET", f"/api/v1/acme/quotas?key_id={agent.key_id}", None, stack.keys.management)
    assert got.status == 200 and got.json()["writes_per_day"]["limit"] is None, got.body


@pytest.mark.parametrize("since", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-14:00"])
def test_an_extreme_date_is_a_precise_error_through_the_functions(stack: Stack, since: str) -> None:
    answer = stack.api.request("GET", f"/api/v1/acme/audit?since={quote(since)}", None, stack.keys.management)
    assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_input", answer.body
    over_mcp = rpc(stack, "/mcp", "tools/call", {"name": "usage_report", "arguments": {"since": since}},
                   stack.keys.management)  # fmt: skip
    assert over_mcp.status == 200 and over_mcp.json()["error"]["code"] == -32602, over_mcp.body
    assert over_mcp.json()["error"]["data"] == {"field": "since"}
