"""Issue #27, the audit trail: every call (reads included) over MCP and REST leaves an entry in its context's
hash-chained log — who, which tool, which object ids, the outcome, never a payload — that management reads
with `audit_query` (MCP, REST, CLI) and checks with `audit_verify` / `engram audit verify`."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import httpx
import pytest

from engram.cli.devserver import cli
from engram.kernel.clock import SystemClock
from engram.settings import Settings
from engram.wiring import build_local
from tests.conftest import Live
from tests.fixtures.files import sqlite_files_holding
from tests.functional.mcpclient import connect

ALICE = [["org/acme/user/alice"]]


async def test_every_call_leaves_ids_and_outcome_and_no_content(live: Live) -> None:
    secret = f"zebra-quasar-{uuid.uuid4().hex[:8]}"
    agent_key = live.engram.identity.authenticate(live.keys.agent).key_id
    async with connect(live.url, live.keys.agent) as c:
        stored = await c.call_tool("memory_store", {"content": f"My locker code is {secret}.", "scopes": ALICE})
        assert not stored.is_error and stored.structured_content is not None
        memory_id = stored.structured_content["turn_id"]
        recalled = await c.call_tool("memory_recall", {"query": f"locker {secret}", "lens": ALICE})
        assert not recalled.is_error
        missing = await c.call_tool("knowledge_get", {"id": "doc:nope"})
        assert missing.is_error
        refused = await c.call_tool("audit_query", {})  # management only
        assert refused.is_error
    async with connect(live.url, live.keys.management) as m:
        page = await m.call_tool("audit_query", {"key_id": agent_key, "limit": 50})
        assert not page.is_error and page.structured_content is not None
        entries = page.structured_content["entries"]
        by_tool = {e["tool"]: e for e in reversed(entries)}  # newest first: the last of each tool wins
        store = by_tool["memory_store"]
        assert (store["principal"], store["outcome"], store["transport"]) == ("agent", "ok", "http")
        assert memory_id in store["objects"]
        assert memory_id in by_tool["memory_recall"]["objects"]  # reads name what they returned
        assert (by_tool["knowledge_get"]["outcome"], by_tool["knowledge_get"]["code"]) == ("error", "not_found")
        assert "doc:nope" not in by_tool["knowledge_get"]["objects"]  # an id a caller chose: a keyed hash of it
        assert [o[:2] for o in by_tool["knowledge_get"]["objects"]] == ["h:"]
        chosen = await m.call_tool("audit_query", {"object_id": "doc:nope", "key_id": agent_key})
        assert chosen.structured_content is not None
        assert [e["tool"] for e in chosen.structured_content["entries"]][:1] == ["knowledge_get"]
        assert by_tool["audit_query"]["outcome"] == "error"  # the refusal too
        seqs = [e["seq"] for e in entries]
        assert seqs == sorted(seqs, reverse=True)
        only = await m.call_tool("audit_query", {"object_id": memory_id})
        assert only.structured_content is not None
        assert {e["tool"] for e in only.structured_content["entries"]} >= {"memory_store", "memory_recall"}
        verified = await m.call_tool("audit_verify", {})
        assert verified.structured_content is not None and verified.structured_content["ok"]
    held = sqlite_files_holding(live.engram.settings.data_dir, "audit.db*", secret.encode(), memory_id.encode())
    assert held[secret.encode()] == [] and held[memory_id.encode()] != []  # ids, never the payload (the WAL too)


async def test_another_tenant_sees_none_of_it(live: Live) -> None:
    async with connect(live.url, live.keys.agent) as c:
        await c.call_tool("memory_recall", {"query": "anything"})
    async with connect(live.url, live.keys.other_tenant) as other:
        page = await other.call_tool("audit_query", {"tool": "memory_recall"})
        assert page.structured_content is not None
        assert page.structured_content["entries"] == [] or all(
            e["key_id"] != live.engram.identity.authenticate(live.keys.agent).key_id
            for e in page.structured_content["entries"]
        )


def test_rest_pages_with_a_cursor_and_verifies(live: Live) -> None:
    headers = {"Authorization": f"Bearer {live.keys.agent}"}
    with httpx.Client(base_url=f"{live.url}/api/v1/acme", headers=headers, timeout=30) as c:
        for i in range(5):
            assert c.get("/context/value", params={"key": f"audit/{i}"}).status_code in (200, 404)
    mgmt = {"Authorization": f"Bearer {live.keys.management}"}
    with httpx.Client(base_url=f"{live.url}/api/v1/acme", headers=mgmt, timeout=30) as c:
        first = c.get("/audit", params={"limit": 2})
        assert first.status_code == 200, first.text
        body = first.json()
        assert len(body["entries"]) == 2 and body["next_cursor"]
        second = c.get("/audit", params={"limit": 2, "cursor": body["next_cursor"]}).json()
        assert second["entries"][0]["seq"] == body["entries"][-1]["seq"] - 1
        assert c.get("/audit", params={"cursor": "x"}).status_code == 400
        report = c.get("/audit/verify").json()
        assert report["ok"] and report["entries"] >= 5


def test_the_cli_verifies_and_finds_a_tampered_entry(tmp_path: Path) -> None:
    engram = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False), SystemClock())
    for i in range(10):
        engram.audit.record("acme", key_id="k1", principal="agent", tool=f"tool{i}", transport="http",
                            objects_=[f"obj{i}"], outcome="ok")  # fmt: skip
    assert '"ok": true' in cli("audit", "verify", "--context", "acme", data_dir=tmp_path)
    lines = cli("audit", "query", "--context", "acme", "--tool", "tool3", data_dir=tmp_path).splitlines()
    assert len(lines) == 1 and '"obj3"' not in lines[0] and '"h:' in lines[0]  # an id no Engram made: hashed
    with sqlite3.connect(tmp_path / "audit.db") as conn:  # someone edits the file behind Engram's back
        conn.execute("UPDATE audit SET data = replace(data, 'tool5', 'tool6') WHERE seq = 6")
    with pytest.raises(RuntimeError, match="altered"):
        cli("audit", "verify", "--context", "acme", data_dir=tmp_path)
