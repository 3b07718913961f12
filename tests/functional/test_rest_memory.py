"""The memory family over REST: the same operations, Spectron's routes, HTTP statuses."""

from __future__ import annotations

import httpx

from tests.conftest import Live

ALICE = [["org/acme/user/alice"]]


def api(live: Live, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=live.url + "/api/v1", headers=headers, timeout=30)


def test_facts_batch_context_profile_forget(live: Live) -> None:
    with api(live, live.keys.agent) as c:
        r = c.post(
            "/acme/facts/batch",
            json={
                "scopes": ALICE,
                "turns": [
                    {"content": "I work as a pilot.", "session_id": "rest-1", "said_at": "2024-05-01T10:00:00Z"},
                    {
                        "content": "My favorite airline is KLM.",
                        "session_id": "rest-1",
                        "said_at": "2024-05-01T10:05:00Z",
                    },
                ],
            },
        )
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [a["key"] for res in results for a in res["attributes"]] == ["role", "favorite_airline"]
        r = c.post("/acme/context", json={"query": "what is alice's job", "lens": ALICE})
        assert r.status_code == 200 and "pilot" in r.json()["context"]
        r = c.get("/acme/profile", params={"scopes": '[["org/acme/user/alice"]]'})
        assert r.status_code == 200
        assert {"key": "favorite_airline", "value": "KLM"}.items() <= r.json()["preferences"][-1].items()
        # the same selector as a plain path, and repeated (alternatives)
        plain = c.get("/acme/profile", params={"scopes": "org/acme/user/alice"})
        assert plain.status_code == 200 and plain.json() == r.json()
        both = c.get("/acme/profile", params=[("scopes", "org/acme/user/alice"), ("scopes", "org/acme/user/bob")])
        assert both.status_code == 200 and {"key": "favorite_airline", "value": "KLM"}.items() <= (
            both.json()["preferences"][-1].items()
        )
        assert c.get("/acme/profile", params={"scopes": "org/globex"}).status_code == 403
        assert c.get("/acme/profile", params={"scopes": "not a path"}).status_code == 400
        r = c.post("/acme/forget", json={"query": "favorite airline", "scopes": ALICE})
        assert r.status_code == 200 and r.json()["deleted"] >= 1
        r = c.post("/acme/reflect", json={"query": "flying"})
        assert r.status_code == 200 and "reflection" in r.json()


def test_rest_errors_have_status_and_shape(live: Live) -> None:
    with api(live, live.keys.agent) as c:
        r = c.post("/acme/facts", json={"content": ""})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
        r = c.post("/acme/facts", json={"content": "x", "surprise": True})
        assert r.status_code == 400 and "surprise" in r.json()["error"]["message"]
        r = c.post("/acme/context", json={"query": "x", "k": 500})
        assert r.status_code == 400
        r = c.post("/globex/context", json={"query": "x"})
        assert r.status_code == 401  # another tenant's context is masked as 401
        r = c.post("/acme/facts", json={"content": "x", "context_id": "globex"})
        assert r.status_code == 400
        r = c.post("/acme/facts", json={"content": "hi", "scopes": [["org/globex"]]})
        assert r.status_code == 403 and r.json()["error"]["code"] == "grant_denied"
        r = c.post("/acme/context", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400
    with api(live, live.keys.supervisor) as c:
        r = c.post("/acme/facts", json={"content": "hi"})
        assert r.status_code == 403
        r = c.post("/acme/scopes", json={"paths": ["org/acme/team/x"]})
        assert r.status_code == 403
    with api(live, None) as c:
        assert c.post("/acme/context", json={"query": "x"}).status_code == 401
    with api(live, live.keys.revoked) as c:
        assert c.post("/acme/context", json={"query": "x"}).status_code == 401


def test_denials_are_audited_and_counted(live: Live, caplog: object) -> None:
    from engram.kernel.observability import metrics

    before = metrics.total("authz.denied")
    with api(live, live.keys.agent) as c:
        c.post("/globex/context", json={"query": "x"})
    assert metrics.total("authz.denied") == before + 1


def test_management_registers_scopes_and_openapi_lists_routes(live: Live) -> None:
    with api(live, live.keys.management) as c:
        r = c.post("/acme/scopes", json={"paths": ["org/acme/team/eng"]})
        assert r.status_code == 200 and r.json() == {"registered": ["org/acme/team/eng"]}
        # registration stays inside the key's grant (org/acme), and paths are checked strictly
        for paths, status in (
            (["org/globex/evil"], 403),
            (["org"], 403),
            (["org/acme/team/ok", "org/globex/evil"], 403),
            (["org/acme/x\n"], 400),
            (["org/acme/../globex"], 400),
        ):
            r = c.post("/acme/scopes", json={"paths": paths})
            assert r.status_code == status, (paths, r.text)
        listed = live.engram.identity.registered("acme")
        assert "org/globex/evil" not in listed and "org/acme/team/ok" not in listed  # nothing half registered
        r = c.get("/acme/identity")
        assert r.json()["principal"] == "management"
    spec = httpx.get(live.url + "/openapi.json").json()
    for path in ("facts", "facts/batch", "context", "reflect", "profile", "forget", "recall", "reconstruct"):
        assert f"/api/v1/{{context_id}}/{path}" in spec["paths"]


def test_openapi_document_is_valid_and_complete(live: Live) -> None:
    """Path parameters declared, every reference resolves, the bearer key declared (OpenAPI 3.1)."""
    import json
    import re

    from openapi_spec_validator import validate

    spec = httpx.get(live.url + "/openapi.json").json()
    validate(spec)  # raises on a reference that does not resolve, or a malformed operation
    assert "#/$defs/" not in json.dumps(spec)
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An Engram API key (sk-...)",
    }
    for path, item in spec["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in item.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            assert declared == set(re.findall(r"{(\w+)}", path)), (method, path)
            assert operation["security"] == [{"bearer": []}], (method, path)
    facts = spec["paths"]["/api/v1/{context_id}/facts/batch"]["post"]
    turn = facts["requestBody"]["content"]["application/json"]["schema"]["properties"]["turns"]["items"]
    assert "content" in turn["properties"]  # TurnIn inlined where it is used


def test_docs_pages_work_offline(live: Live) -> None:
    """/docs and /redoc load their scripts and styles from this server, never from a CDN."""
    import re

    for page in ("/docs", "/redoc"):
        html = httpx.get(live.url + page)
        assert html.status_code == 200
        assets = re.findall(r'(?:src|href)="([^"]+)"', html.text)
        assert assets and all(a.startswith("/") for a in assets), assets  # nothing from another host
        for asset in assets:
            got = httpx.get(live.url + asset)
            assert got.status_code == 200 and len(got.content) > 1000, asset
    assert "/openapi.json" in httpx.get(live.url + "/docs").text
