"""The working-context family over REST (the same operations as the MCP tools): routes, statuses, errors."""

from __future__ import annotations

import uuid

import httpx

from engram.families.context.service import MAX_VALUE_BYTES
from tests.conftest import Live


def test_set_get_merge_list_history_over_rest(live: Live) -> None:
    key = f"cfg-{uuid.uuid4().hex[:6]}/debug"
    headers = {"Authorization": f"Bearer {live.keys.agent}"}
    with httpx.Client(base_url=f"{live.url}/api/v1/acme", headers=headers, timeout=30) as c:
        r = c.put("/context/value", json={"key": key, "value": {"enabled": True}, "ttl_seconds": 60})
        assert r.status_code == 200 and r.json()["version"] == 1 and r.json()["expires_at"]
        got = c.get("/context/value", params={"key": key})  # a key with "/" rides in the query string
        assert got.status_code == 200 and got.json()["value"] == {"enabled": True}
        merged = c.patch("/context/value", json={"key": key, "value": {"level": 2}})
        assert merged.json() == {"key": key, "version": 2, "merged_keys": ["level"]}
        listed = c.get("/context/keys", params={"prefix": key.split("/")[0]}).json()
        assert listed["keys"] == [{"key": key, "version": 2, "has_ttl": True}]
        history = c.get("/context/history", params={"key": key}).json()
        assert [v["version"] for v in history["versions"]] == [2, 1]
        missing = c.get("/context/value", params={"key": "nope/nothing"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        # over the value limit: this server's request cap (200,000 bytes) answers first, naming its limit
        # (the value limit itself, MAX_VALUE_BYTES, is in the contract suite)
        big = c.put("/context/value", json={"key": key, "value": "x" * (MAX_VALUE_BYTES + 10)})
        assert big.status_code == 413 and "200000 bytes" in big.json()["error"]["message"]
        stale = c.put("/context/value", json={"key": key, "value": 1, "expected_version": 1})
        assert stale.status_code == 409
        assert c.get("/context/value", params={"key": key}).json()["version"] == 2  # nothing written
    with httpx.Client(base_url=f"{live.url}/api/v1/acme", timeout=30) as anonymous:
        assert anonymous.get("/context/value", params={"key": key}).status_code == 401
