"""The records family over REST (the same operations as the MCP tools): schemas, records, lookups, history,
principals — routes, statuses and the error shape, bad input of every kind, another tenant, no key."""

from __future__ import annotations

import uuid

import httpx

from tests.conftest import Live

TAG = uuid.uuid4().hex[:6]
SCHEMA = {
    "type": f"part{TAG}",
    "jsonSchema": {
        "type": "object",
        "properties": {"pn": {"type": "string"}, "mass": {"type": "number", "exclusiveMinimum": 0}},
        "required": ["pn", "mass"],
    },
    "lookupFields": [{"field": "pn", "ops": ["exact", "prefix"]}, {"field": "mass", "ops": ["range"]}],
    "indexMode": "keyword",
}


def client(live: Live, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=f"{live.url}/api/v1/acme", headers=headers, timeout=30)


def test_records_over_rest(live: Live) -> None:
    kind = SCHEMA["type"]
    with client(live, live.keys.management) as m:
        assert m.post("/schemas", json=SCHEMA).status_code == 200
    with client(live, live.keys.agent) as c:
        assert c.post("/schemas", json=SCHEMA).status_code == 403  # management registers schemas
        listed = c.get("/schemas", params={"type": kind}).json()["schemas"]
        assert [s["lookupFields"][0]["field"] for s in listed] == ["pn"]
        made = c.post("/records", json={"type": kind, "payload": {"pn": "PN-1", "mass": 2.5}, "externalId": "p1"})
        assert made.status_code == 200 and made.json()["created"] is True, made.text
        rid = made.json()["id"]
        assert c.get(f"/records/{rid}").json()["payload"] == {"pn": "PN-1", "mass": 2.5}
        changed = c.patch(f"/records/{rid}", json={"payload": {"pn": "PN-2", "mass": 3}, "expectedVersion": 1})
        assert changed.status_code == 200 and changed.json()["version"] == 2
        found = c.post("/records/lookup", json={"type": kind, "field": "mass", "from": 3, "to": 3})
        assert [r["id"] for r in found.json()["items"]] == [rid]
        history = c.get(f"/history/{rid}").json()
        assert [v["operation"] for v in history["versions"]] == ["update", "create"]
        assert c.delete(f"/records/{rid}").json() == {"id": rid, "deleted": True, "version": 3}
        assert c.get(f"/records/{rid}").status_code == 404
        assert c.get(f"/history/{rid}").json()["versions"][0]["operation"] == "delete"  # its history stays
        principal = c.post("/principals/lookup", json={"externalId": "acme"})
        assert principal.status_code == 200 and principal.json()["id"] == "org/acme"


def test_bad_record_input_gets_a_precise_error_and_writes_nothing(live: Live) -> None:
    kind = SCHEMA["type"]
    with client(live, live.keys.management) as m:
        assert m.post("/schemas", json=SCHEMA).status_code == 200
    with client(live, live.keys.agent) as c:
        before = c.post("/records/lookup", json={"type": kind, "limit": 100}).json()["items"]
        cases = [
            ({"type": kind, "payload": {"pn": "PN-9", "mass": 0}}, 400, "schema_violation", "payload.mass"),
            ({"type": kind, "payload": {"pn": 9, "mass": 1}}, 400, "schema_violation", "payload.pn"),
            ({"type": "nosuch", "payload": {}}, 404, "unknown_schema", "no schema"),
            ({"type": kind, "payload": {"pn": "x" * 300_000, "mass": 1}}, 413, None, "bytes"),
            ({"type": kind, "payload": "not an object"}, 400, None, "payload"),
            ({"type": kind, "payload": {"pn": "PN-9", "mass": 1}, "bogus": 1}, 400, None, "bogus"),
            ({"type": kind, "payload": {"pn": "PN-9\u0000", "mass": 1}}, 400, "schema_violation", "control"),
        ]
        for body, status, code, words in cases:
            r = c.post("/records", json=body)
            assert r.status_code == status, (body, r.text)
            error = r.json()["error"]
            assert words in error["message"] and (code is None or error["code"] == code), r.text
        bad_utf8 = c.post("/records", content=b'{"type": "x", "payload": {"pn": "\xff"}}',
                          headers={"Content-Type": "application/json"})  # fmt: skip
        assert bad_utf8.status_code == 400
        assert c.post("/records/lookup", json={"type": kind, "limit": 100}).json()["items"] == before
        bad_lookup = c.post("/records/lookup", json={"type": kind, "field": "mass", "op": "prefix", "value": "1"})
        assert bad_lookup.status_code == 400 and "prefix" in bad_lookup.json()["error"]["message"]
        assert c.get("/records/rec_UNKNOWN").status_code == 404
        assert c.get("/history/nothing-like-an-id").status_code == 404
    with client(live, live.keys.other_tenant) as other:  # another tenant's key, this tenant's path
        assert other.get("/schemas").status_code in (401, 403)
    with client(live, None) as anonymous:
        assert anonymous.post("/records", json={"type": kind, "payload": {}}).status_code == 401
