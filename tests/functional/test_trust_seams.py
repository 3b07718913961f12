"""Issue #49, trust at the seams, tried as an attacker would over real HTTP: each context's trust is its own, nobody
lifts a limit that binds themselves, the observability surfaces say nothing without a key. Each test failed on the
code before its fix."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.adapters import jwks
from engram.cli.devserver import cli
from engram.kernel.clock import SystemClock
from engram.kernel.errors import NotFound
from engram.settings import Settings
from engram.trust.receipts import Signer
from engram.wiring import build_local
from tests.conftest import Live
from tests.fixtures.files import sqlite_files_holding
from tests.functional.mcpclient import connect
from tests.oauth_server import AuthServer, running_auth_server

ALICE = "org/acme/user/alice"
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
WHO = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "current_identity", "arguments": {}}}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}


@pytest.fixture
def two_servers(live: Live, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[AuthServer, AuthServer]]:
    """acme's authorization server, trusted by acme's manager; and another one, which globex's manager runs."""
    with running_auth_server() as acme_idp, running_auth_server() as globex_idp:
        monkeypatch.setattr(live.engram.settings, "oauth_allowed_issuers", [acme_idp.issuer, globex_idp.issuer])
        jwks.forget()
        policy = {"issuer": acme_idp.issuer, "audience": [f"{live.url}/mcp"], "grant": ["org/acme/user"]}
        made = httpx.post(f"{live.url}/api/v1/acme/oauth/issuers", json=policy, headers=bearer(live.keys.management))
        assert made.status_code == 200, made.text
        try:
            yield acme_idp, globex_idp
        finally:
            for context in ("acme", "globex"):
                with contextlib.suppress(NotFound):  # not trusted there
                    live.engram.identity.issuers.remove(context, acme_idp.issuer)
            jwks.forget()


def test_another_context_trusting_the_same_issuer_url_with_its_own_keys_signs_for_nobody_else(
    live: Live, two_servers: tuple[AuthServer, AuthServer]
) -> None:
    """The critical one: globex's manager trusted acme's issuer URL with globex's own `jwks_uri`. A token globex
    signed, claiming acme, was accepted as acme's user, and acme's real tokens got 401."""
    acme_idp, globex_idp = two_servers
    aud = f"{live.url}/mcp"
    real = acme_idp.mint(aud=aud, scope=f"engram:agent engram:grant:{ALICE}")
    assert httpx.post(live.url + "/mcp", json=WHO, headers=bearer(real)).status_code == 200
    attack = {"issuer": acme_idp.issuer, "jwks_uri": f"{globex_idp.issuer}/jwks", "audience": [aud],
              "grant": ["org/globex"]}  # fmt: skip
    made = httpx.post(f"{live.url}/api/v1/globex/oauth/issuers", json=attack, headers=bearer(live.keys.other_tenant))
    assert made.status_code == 200, made.text  # globex may trust whom it likes, for globex
    live.engram.identity.issuers._cache.drop(acme_idp.issuer)  # as after POLICY_TTL: every process reads it again
    forged_claims: dict[str, Any] = {"iss": acme_idp.issuer, "aud": aud}
    for scope in (f"engram:context:acme engram:agent engram:grant:{ALICE}", f"engram:agent engram:grant:{ALICE}"):
        forged = globex_idp.mint(scope=scope, **forged_claims)  # globex's key, acme's issuer name
        answer = httpx.post(live.url + "/mcp", json=WHO, headers=bearer(forged))
        if answer.status_code == 200:  # may only ever be globex's own user, never acme's
            assert answer.json()["result"]["structuredContent"]["contexts"] == ["globex"], scope
        else:
            assert answer.status_code == 401, answer.text
    # acme's real tokens still pass, and are acme's
    again = httpx.post(live.url + "/mcp", json=WHO, headers=bearer(real))
    assert again.status_code == 200, again.text
    me = again.json()["result"]["structuredContent"]
    assert me["contexts"] == ["acme"] and me["grant"] == [ALICE]
    # a token signed by acme's key naming globex is not globex's either (globex trusts other keys)
    crossed = acme_idp.mint(aud=aud, scope="engram:context:globex engram:agent engram:grant:org/globex")
    assert httpx.post(live.url + "/mcp", json=WHO, headers=bearer(crossed)).status_code == 401


def test_an_issuer_trusted_in_two_contexts_needs_the_token_to_name_one(
    live: Live, two_servers: tuple[AuthServer, AuthServer]
) -> None:
    """A token is the context's it names, or the single context its issuer is trusted in (a guard of the rule: the
    code before refused this token too, by the grant's shape)."""
    acme_idp, _ = two_servers
    aud = f"{live.url}/mcp"
    both = {"issuer": acme_idp.issuer, "audience": [aud], "grant": ["org/globex"]}
    made = httpx.post(f"{live.url}/api/v1/globex/oauth/issuers", json=both, headers=bearer(live.keys.other_tenant))
    assert made.status_code == 200, made.text
    live.engram.identity.issuers._cache.drop(acme_idp.issuer)
    unnamed = acme_idp.mint(aud=aud, scope=f"engram:agent engram:grant:{ALICE}")
    assert httpx.post(live.url + "/mcp", json=WHO, headers=bearer(unnamed)).status_code == 401
    named = acme_idp.mint(aud=aud, scope=f"engram:context:acme engram:agent engram:grant:{ALICE}")
    answer = httpx.post(live.url + "/mcp", json=WHO, headers=bearer(named))
    assert answer.status_code == 200 and answer.json()["result"]["structuredContent"]["contexts"] == ["acme"]


def test_an_offline_receipt_check_trusts_only_the_deployments_published_key(live: Live, tmp_path: Path) -> None:
    """`engram erasure verify` without `--public-key` trusted the key inside the receipt: a receipt re-signed by
    anyone's key was `valid`. Now it needs a pinned key, or `--url` to read the one the deployment publishes."""
    document = {"request": "er_x", "subject": {"scope": ALICE}, "erased": {"records": {"turn": 3}}}
    genuine = live.engram.erasure.signer().sign(document)
    forged = Signer(Signer.new_private_key()).sign(dict(document, erased={"records": {"turn": 0}}))
    good, bad = tmp_path / "good.json", tmp_path / "forged.json"
    good.write_text(json.dumps(genuine))
    bad.write_text(json.dumps(forged))
    data = tmp_path / "data"
    assert cli("erasure", "verify", str(good), f"--url={live.url}", data_dir=data).startswith("valid")
    for args in ((str(bad),), (str(bad), f"--url={live.url}"), (str(good),)):
        with pytest.raises(RuntimeError):  # exit status 1: INVALID
            cli("erasure", "verify", *args, data_dir=data)
    with pytest.raises(RuntimeError, match="cannot read the deployment's receipt key"):
        cli("erasure", "verify", str(good), "--url=http://example.com", data_dir=data)  # http off loopback: refused


def test_nobody_sets_or_lifts_a_limit_that_binds_themselves(live: Live) -> None:
    """A manager of one region removed the quota its context's manager had set on its key and raised its own
    `writes_per_day` to a million. Now a key sets quotas only of keys strictly below it; the context's are the
    operator's."""
    ctx = f"q{uuid.uuid4().hex[:10]}"
    region = f"org/{ctx}/user/bob"
    admin, admin_p = live.engram.identity.create_key([ctx], "management", [f"org/{ctx}"])
    peer, peer_p = live.engram.identity.create_key([ctx], "management", [f"org/{ctx}"])
    agent, agent_p = live.engram.identity.create_key([ctx], "agent", [f"org/{ctx}"])
    narrow, narrow_p = live.engram.identity.create_key([ctx], "management", [region])
    url = f"{live.url}/api/v1/{ctx}/quotas"
    set_by_admin = httpx.post(url, json={"key_id": narrow_p.key_id, "writes_per_day": 10}, headers=bearer(admin))
    assert set_by_admin.status_code == 200, set_by_admin.text  # a narrower manager: below the context's
    attempts = [
        (narrow, {"key_id": narrow_p.key_id}),  # lifting its own limit (every field unset)
        (narrow, {"key_id": narrow_p.key_id, "writes_per_day": 1_000_000}),
        (narrow, {"writes_per_day": 1_000_000}),  # the context's, which bind it too
        (admin, {"key_id": admin_p.key_id, "requests_per_minute": 10**6}),  # the context's manager, on itself
        (admin, {"key_id": peer_p.key_id, "requests_per_minute": 0}),  # a peer as wide as itself
        (peer, {"key_id": admin_p.key_id, "requests_per_minute": 0}),
        (admin, {"requests_per_minute": 10**6}),  # the context's
    ]
    for key, body in attempts:
        answer = httpx.post(url, json=body, headers=bearer(key))
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "grant_denied", (body, answer.text)
    got = httpx.get(url, params={"key_id": narrow_p.key_id}, headers=bearer(admin)).json()
    assert got["writes_per_day"]["limit"] == 10  # what the context's manager set stands
    assert httpx.get(url, headers=bearer(admin)).json()["writes_per_day"]["limit"] is None
    lesser = httpx.post(url, json={"key_id": agent_p.key_id, "writes_per_day": 5}, headers=bearer(admin))
    assert lesser.status_code == 200  # an agent key of the same paths: a lesser role, so below it
    assert httpx.get(f"{live.url}/api/v1/{ctx}/profile", headers=bearer(agent)).status_code == 200


EXTREME_TIMES = ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-14:00", "0001-01-01", "1969-12-31T23:59:59Z"]
BAD_CURSORS = ["1" * 32, "²", "١٢٣", "-1", " 7"]


def _mcp(live: Live, key: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    answer = httpx.post(live.url + "/mcp", json=call, headers=bearer(key))
    assert answer.status_code == 200, (tool, arguments, answer.status_code, answer.text[:300])
    body: dict[str, Any] = answer.json()
    return body


def _refused_as_input(body: dict[str, Any]) -> bool:
    if "error" in body:
        return bool(body["error"]["code"] == -32602)
    result = body["result"]
    return bool(result.get("isError")) and result["structuredContent"]["error"]["status"] == 400


def test_extreme_dates_and_cursors_are_precise_errors_never_a_500(live: Live) -> None:
    """`since` year 1 at +05:00 or 9999 at -14:00, a 32-digit or a superscript-digit cursor, `said_at` year 1 with
    an offset, Agrama's `dateTo` at the end of 9999: HTTP 500 on MCP and REST. Now one bounded date type at the
    edge (1970 to 9999 UTC) and cursors checked: 400 / invalid input, and the server answers the next call."""
    m, a = live.keys.management, live.keys.agent
    for when in EXTREME_TIMES:
        calls = [
            (m, "audit_query", {"since": when}),
            (m, "audit_query", {"until": when}),
            (m, "usage_report", {"since": when}),
            (a, "memory_store", {"content": "I moved to Lisbon.", "said_at": when}),
            (a, "memory_recall", {"query": "where do I live", "as_of": when}),
            (a, "hybrid_search", {"query": "paths", "dateTo": when}),
            (a, "hybrid_search", {"query": "paths", "dateFrom": when}),
        ]
        for key, tool, arguments in calls:
            assert _refused_as_input(_mcp(live, key, tool, arguments)), (tool, arguments)
        for path in ("audit", "usage"):
            answer = httpx.get(f"{live.url}/api/v1/acme/{path}", params={"since": when}, headers=bearer(m))
            assert answer.status_code in (400, 422), (path, when, answer.status_code, answer.text[:200])
    for cursor in BAD_CURSORS:
        body = _mcp(live, m, "audit_query", {"cursor": cursor})
        assert _refused_as_input(body), (cursor, body)
        answer = httpx.get(f"{live.url}/api/v1/acme/audit", params={"cursor": cursor}, headers=bearer(m))
        assert answer.status_code in (400, 422), (cursor, answer.status_code, answer.text[:200])
    fine = _mcp(live, m, "audit_query", {"since": "1970-01-01T00:00:00Z", "until": "9999-12-31T00:00:00+00:00"})
    assert "result" in fine and not fine["result"].get("isError"), fine


def test_metrics_need_a_managers_key_and_show_only_its_own_contexts_counters(live: Live) -> None:
    """`GET /metrics` answered without a key with every tenant's `authz.denied` counters: who is probing whom, as
    it happens. Now it needs a key that governs a whole context, and counts only that context's."""
    ctx = f"m{uuid.uuid4().hex[:10]}"  # a context of its own: the session's others register scopes as they go
    manager, _ = live.engram.identity.create_key([ctx], "management", [f"org/{ctx}"])
    agent, _ = live.engram.identity.create_key([ctx], "agent", [f"org/{ctx}"])
    probe = {"issuer": "https://issuer.example", "audience": ["https://x.example/mcp"], "grant": [f"org/{ctx}"]}
    assert httpx.post(f"{live.url}/api/v1/{ctx}/oauth/issuers", json=probe, headers=bearer(agent)).status_code == 403
    assert httpx.get(f"{live.url}/metrics").status_code == 401
    assert httpx.get(f"{live.url}/metrics", headers=bearer(agent)).status_code == 403
    mine = httpx.get(f"{live.url}/metrics", headers=bearer(manager))
    assert mine.status_code == 200
    denied = [r for r in mine.json() if r["name"] == "authz.denied"]
    assert denied and all(r["dimensions"]["context"] == ctx for r in denied), mine.json()
    globex = httpx.get(f"{live.url}/metrics", headers=bearer(live.keys.other_tenant)).json()
    assert all(r["dimensions"].get("context") == "globex" for r in globex)


def test_a_narrower_manager_reads_no_counts_of_the_whole_contexts_trail(live: Live) -> None:
    """`audit_verify`'s `entries` (and first / last) and `audit_query`'s `scanned` counted everyone's calls in the
    context for a manager of one user's region."""
    ctx = f"n{uuid.uuid4().hex[:10]}"
    manager, _ = live.engram.identity.create_key([ctx], "management", [f"org/{ctx}"])
    narrow, _ = live.engram.identity.create_key([ctx], "management", [f"org/{ctx}/user/bob"])
    for key, whole in ((narrow, False), (manager, True)):
        verified = _mcp(live, key, "audit_verify", {})["result"]["structuredContent"]
        page = _mcp(live, key, "audit_query", {"limit": 5})["result"]["structuredContent"]
        assert verified["ok"]
        if whole:
            assert verified["entries"] > 0 and verified["last"] >= verified["first"] and page["scanned"] > 0
        else:
            assert (verified["entries"], verified["first"], verified["last"], page["scanned"]) == (None,) * 4


def test_the_cli_finds_an_emptied_or_deleted_audit_log(tmp_path: Path) -> None:
    """Deleting every entry of `audit.db` (or the file) verified `ok`: the mark in `audit-mark.db` names the last."""
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, embedder="none", queue_worker=False), SystemClock())
    for i in range(5):
        engram.audit.record("acme", key_id="k1", principal="agent", tool=f"tool{i}", transport="http",
                            objects_=[f"obj{i}"], outcome="ok")  # fmt: skip
    assert '"ok": true' in cli("audit", "verify", "--context", "acme", data_dir=data)
    with sqlite3.connect(data / "audit.db") as conn:
        conn.execute("DELETE FROM audit")
    with pytest.raises(RuntimeError, match="removed from the log's end"):
        cli("audit", "verify", "--context", "acme", data_dir=data)
    engram.audit.log = None  # let go of the file
    for name in ("audit.db", "audit.db-wal", "audit.db-shm"):
        (data / name).unlink(missing_ok=True)
    with pytest.raises(RuntimeError, match="removed from the log's end"):
        cli("audit", "verify", "--context", "acme", data_dir=data)


async def test_the_audit_trail_holds_nothing_taken_from_content(live: Live) -> None:
    """Entries held entity ids with names extracted from content (`Person:alice wonderbeam`, a home town) and
    caller-chosen ids, and kept them after an erasure. Now an id Engram did not make is a keyed hash."""
    name = "Zorb" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:6])  # a company, by its name
    async with connect(live.url, live.keys.agent) as c:
        stored = await c.call_tool(
            "memory_store",
            {"content": f"My name is Quilla Wonderbeam and I work at {name.title()}.", "scopes": [[ALICE]]},
        )
        assert not stored.is_error
        live.engram.queue.join()
        found = await c.call_tool("entity_list", {"limit": 50})
        assert found.structured_content is not None
        ids = [e["id"] for e in found.structured_content["entities"] if e["name"].lower() == name.lower()]
        assert ids, found.structured_content  # the extractor found the company
        assert name.lower() not in ids[0].lower()  # its id holds nothing of its name (it did: `Organization:...`)
        await c.call_tool("entity_query", {"name": name.title()})
        await c.call_tool("context_set", {"key": f"notes-{name}", "value": {"x": 1}})
    async with connect(live.url, live.keys.management) as m:
        page = await m.call_tool("audit_query", {"limit": 20})
        assert page.structured_content is not None
        text = json.dumps(page.structured_content)
        assert name.lower() not in text.lower(), text[:500]
        by_id = await m.call_tool("audit_query", {"object_id": ids[0]})  # found by the id all the same
        assert by_id.structured_content is not None and by_id.structured_content["entries"]
    held = sqlite_files_holding(live.engram.settings.data_dir, "audit*.db*", name.encode(), name.lower().encode())
    assert held[name.encode()] == [] and held[name.lower().encode()] == []


def test_no_call_in_one_context_changes_what_another_context_holds_or_accepts(live: Live) -> None:
    """Every per-context setting a manager can change — quotas, schemas, scope paths, trusted issuers (above) —
    tried from a second context's manager against the first's keys and names: refused or confined to its own
    context, and the first context keeps what it had."""
    a, b = f"a{uuid.uuid4().hex[:9]}", f"b{uuid.uuid4().hex[:9]}"
    ident = live.engram.identity
    manager_a, _ = ident.create_key([a], "management", [f"org/{a}"])
    manager_b, _ = ident.create_key([b], "management", [f"org/{b}"])
    agent_a, agent_a_p = ident.create_key([a], "agent", [f"org/{a}"])

    def call(key: str, method: str, ctx: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(method, f"{live.url}/api/v1/{ctx}{path}", headers=bearer(key), **kw)

    # quotas: B's manager names A's agent key, from B's context and from A's path
    from_b = call(manager_b, "POST", b, "/quotas", json={"key_id": agent_a_p.key_id, "writes_per_day": 0})
    unknown = call(manager_b, "POST", b, "/quotas", json={"key_id": "key_000000000000", "writes_per_day": 0})
    assert from_b.status_code == unknown.status_code == 403, from_b.text  # as a key that does not exist
    assert from_b.json()["error"] == unknown.json()["error"]
    assert call(manager_b, "POST", a, "/quotas", json={"writes_per_day": 0}).status_code == 401  # masked
    limits = call(manager_a, "GET", a, "/quotas", params={"key_id": agent_a_p.key_id}).json()
    assert limits["writes_per_day"]["limit"] is None
    # schemas: the same type name in both, each its own
    note_b = {"type": "note", "jsonSchema": {"type": "object", "required": ["b_only"]}}
    assert call(manager_b, "POST", b, "/schemas", json=note_b).status_code == 200
    assert call(agent_a, "GET", a, "/schemas", params={"type": "note"}).json()["schemas"] == []
    note_a = {"type": "note", "jsonSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
    assert call(manager_a, "POST", a, "/schemas", json=note_a).status_code == 200
    made = call(agent_a, "POST", a, "/records", json={"type": "note", "payload": {"text": "hello"}})
    assert made.status_code == 200, made.text  # B's `required` does not bind A
    # scope paths: B's manager registers paths of A's namespace; A's own register stays as it was
    before = ident.registered(a)
    from_b = call(manager_b, "POST", b, "/scopes", json={"paths": [f"org/{a}/user/mallory"]})
    assert from_b.status_code in (400, 403), from_b.text
    assert call(manager_b, "POST", a, "/scopes", json={"paths": [f"org/{a}/user/mallory"]}).status_code == 401
    assert ident.registered(a) == before and f"org/{a}/user/mallory" not in ident.registered(b)
    # and A's agent works as before every attempt
    assert call(agent_a, "GET", a, "/identity").status_code == 200
