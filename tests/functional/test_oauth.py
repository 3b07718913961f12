"""Issue #28, Engram as an OAuth 2.1 resource server: a real MCP client (the SDK's `OAuthClientProvider`) discovers
the protected resource metadata from a 401, registers with an authorization server the tests start, runs the
authorization-code flow with PKCE, and calls tools with the JWT it gets; bad tokens of every kind are refused
with the same 401; API keys keep working beside tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from engram.adapters import jwks
from tests.conftest import Live
from tests.functional.mcpclient import connect
from tests.oauth_server import AuthServer, running_auth_server

ALICE = "org/acme/user/alice"


@pytest.fixture(scope="module")
def auth_server() -> Iterator[AuthServer]:
    with running_auth_server() as server:
        yield server


@pytest.fixture
def trusted(live: Live, auth_server: AuthServer) -> Iterator[AuthServer]:
    """The authorization server trusted in context acme, for tokens naming the MCP or REST resource, with at
    most the grant org/acme/user and the roles agent or supervisor."""
    policy = {"issuer": auth_server.issuer, "audience": [f"{live.url}/mcp", f"{live.url}/api/v1"],
              "grant": ["org/acme/user"], "roles": ["agent", "supervisor"]}  # fmt: skip
    live.engram.identity.trust_issuer(None, policy, "acme")
    jwks.forget()
    yield auth_server
    live.engram.identity.issuers.remove("acme", auth_server.issuer)


class Memory:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def oauth_provider(server_url: str) -> tuple[OAuthClientProvider, Memory]:
    """The SDK's OAuth client; its browser step is a GET of the authorization URL whose redirect is read."""
    redirected: dict[str, str] = {}

    async def redirect_handler(url: str) -> None:
        async with httpx.AsyncClient() as http:
            answer = await http.get(url, follow_redirects=False)
        assert answer.status_code == 302, answer.text
        query = parse_qs(urlsplit(answer.headers["location"]).query)
        redirected.update({k: v[0] for k, v in query.items()})

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=redirected["code"], state=redirected["state"], iss=redirected.get("iss"))

    storage = Memory()
    metadata = OAuthClientMetadata(
        client_name="engram-test", redirect_uris=["http://127.0.0.1:9/callback"],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        token_endpoint_auth_method="none",
    )  # fmt: skip
    provider = OAuthClientProvider(server_url, metadata, storage, redirect_handler, callback_handler)
    return provider, storage


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


async def test_a_401_points_to_metadata_naming_the_authorization_server(live: Live, trusted: AuthServer) -> None:
    for path, resource in (("/mcp", "/mcp"), ("/mcp/memory", "/mcp/memory"), ("/api/v1/acme/profile", "/api/v1")):
        answer = httpx.request(
            "GET" if "api" in path else "POST", live.url + path, json=LIST,
            headers={"Accept": "application/json, text/event-stream"},
        )  # fmt: skip
        assert answer.status_code == 401
        challenge = answer.headers["www-authenticate"]
        where = f"{live.url}/.well-known/oauth-protected-resource{resource}"
        assert challenge.startswith("Bearer ") and f'resource_metadata="{where}"' in challenge
        assert "invalid_token" not in challenge  # no token was presented
        meta = httpx.get(where).json()
        assert meta["resource"] == live.url + resource
        assert trusted.issuer in meta["authorization_servers"]
        assert "engram:agent" in meta["scopes_supported"] and meta["bearer_methods_supported"] == ["header"]
    assert httpx.get(f"{live.url}/.well-known/oauth-protected-resource/elsewhere").status_code == 404


async def test_an_mcp_client_runs_discovery_and_the_code_flow_with_pkce_then_calls_tools(
    live: Live, trusted: AuthServer
) -> None:
    provider, storage = oauth_provider(live.url + "/mcp")
    async with (
        httpx2.AsyncClient(auth=provider, timeout=60) as http,
        Client(streamable_http_client(live.url + "/mcp", http_client=http), mode="legacy", cache=None) as client,
    ):
        who = await client.call_tool("current_identity", {})
        assert not who.is_error and who.structured_content is not None
        me = who.structured_content
        assert me["key_id"].startswith("tok_") and me["principal"] == "agent"
        assert (me["contexts"], me["grant"]) == (["acme"], [ALICE])
        stored = await client.call_tool("memory_store", {"content": "Alice's favourite tea is genmaicha."})
        assert not stored.is_error, stored
        recalled = await client.call_tool("memory_recall", {"query": "which tea does alice like"})
        assert recalled.structured_content is not None
        assert any("genmaicha" in str(m) for m in recalled.structured_content["results"])
        refused = await client.call_tool("audit_query", {})  # management only: the token is an agent's
        assert refused.is_error
    assert storage.client is not None and storage.tokens is not None  # registered, then a token
    issued = trusted.tokens_issued[-1]
    assert issued["resource"] == live.url + "/mcp"  # RFC 8707: the token is for this resource
    # the same token on REST (another audience path of the same deployment is not accepted: it names /mcp)
    token = storage.tokens.access_token
    mcp_ok = httpx.post(live.url + "/mcp", json=LIST, headers=bearer(token))
    assert mcp_ok.status_code == 200
    # API keys keep working beside tokens
    async with connect(live.url, live.keys.agent) as c:
        assert not (await c.call_tool("current_identity", {})).is_error
    # the memory is alice's: an agent key of the whole org sees it, tagged with the token's grant
    page = httpx.get(f"{live.url}/api/v1/acme/profile", headers=bearer(live.keys.management))
    assert page.status_code == 200


def _refused(live: Live, token: str) -> None:
    for answer in (
        httpx.post(live.url + "/mcp", json=LIST, headers=bearer(token)),
        httpx.get(f"{live.url}/api/v1/acme/profile", headers=bearer(token)),
    ):
        assert answer.status_code == 401, answer.text
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]
        assert answer.json()["error"]["message"] == "invalid or expired access token"  # never why


def test_a_good_token_passes_and_every_bad_one_is_refused_alike(live: Live, trusted: AuthServer) -> None:
    good = trusted.mint(aud=f"{live.url}/mcp", scope=f"engram:agent engram:grant:{ALICE}")
    assert httpx.post(live.url + "/mcp", json=LIST, headers=bearer(good)).status_code == 200
    rest = trusted.mint(aud=f"{live.url}/api/v1", scope=f"engram:grant:{ALICE}")
    assert httpx.get(f"{live.url}/api/v1/acme/profile", headers=bearer(rest)).status_code == 200
    aud = f"{live.url}/mcp"
    scope = f"engram:agent engram:grant:{ALICE}"
    bad: dict[str, str] = {
        "wrong signature": trusted.mint(key=trusted.other_key, aud=aud, scope=scope),
        "expired": trusted.mint(lifetime=-120, aud=aud, scope=scope),
        "not yet valid": trusted.mint(aud=aud, scope=scope, nbf=int(time.time()) + 600),
        "no exp": trusted.mint(aud=aud, scope=scope, exp=None),
        "wrong audience": trusted.mint(aud="https://elsewhere.example/mcp", scope=scope),
        "no audience": trusted.mint(scope=scope),
        "wrong issuer": trusted.mint(aud=aud, scope=scope, iss="http://127.0.0.1:1"),
        "alg none": trusted.mint(alg="none", aud=aud, scope=scope),
        "HMAC": trusted.mint(key="a-shared-secret-of-32-bytes-or-so!!", alg="HS256", aud=aud, scope=scope),  # type: ignore[arg-type]
        "unknown kid": trusted.mint(kid="rotated-away", aud=aud, scope=scope),
        "grant wider than allowed": trusted.mint(aud=aud, scope="engram:agent engram:grant:org/acme"),
        "grant outside the org": trusted.mint(aud=aud, scope="engram:agent engram:grant:org/globex/user/x"),
        "role not allowed": trusted.mint(aud=aud, scope=f"engram:management engram:grant:{ALICE}"),
        "no grant and no template": trusted.mint(aud=aud, scope="engram:agent"),
        "another context": trusted.mint(aud=aud, scope=f"engram:context:globex engram:grant:{ALICE}"),
        "garbage": "abc.def.ghi",
    }
    for why, token in bad.items():
        try:
            _refused(live, token)
        except AssertionError as exc:
            raise AssertionError(f"{why}: {exc}") from None


def test_an_unknown_kid_fetches_the_keys_again_at_most_every_few_seconds(
    live: Live, trusted: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    aud, scope = f"{live.url}/mcp", f"engram:grant:{ALICE}"
    assert httpx.post(live.url + "/mcp", json=LIST, headers=bearer(trusted.mint(aud=aud, scope=scope))).is_success
    before = trusted.jwks_fetches
    for _ in range(5):  # cached keys: no fetch; unknown kids: one forced fetch, then the gap holds
        httpx.post(live.url + "/mcp", json=LIST, headers=bearer(trusted.mint(kid="nope", aud=aud, scope=scope)))
        httpx.post(live.url + "/mcp", json=LIST, headers=bearer(trusted.mint(aud=aud, scope=scope)))
    assert trusted.jwks_fetches - before <= 1
    # the issuer rotates its key: the first token under the new kid fetches the keys again and passes
    from cryptography.hazmat.primitives.asymmetric import rsa

    monkeypatch.setattr(jwks, "REFRESH_GAP", 0.0)
    old_key, old_kid = trusted.key, trusted.kid
    trusted.key, trusted.kid = rsa.generate_private_key(public_exponent=65537, key_size=2048), "k2"
    try:
        rotated = trusted.mint(aud=aud, scope=scope)
        assert httpx.post(live.url + "/mcp", json=LIST, headers=bearer(rotated)).status_code == 200
        stale = trusted.mint(key=old_key, kid=old_kid, aud=aud, scope=scope)
        assert httpx.post(live.url + "/mcp", json=LIST, headers=bearer(stale)).status_code == 401  # no longer published
    finally:
        trusted.key, trusted.kid = old_key, old_kid


def test_management_trusts_and_distrusts_issuers_inside_its_own_grant(
    live: Live, auth_server: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    jwks.forget()  # the test before rotated the server's key and back within the refresh gap
    m = bearer(live.keys.management)
    url = f"{live.url}/api/v1/acme/oauth/issuers"
    policy: dict[str, Any] = {"issuer": auth_server.issuer, "audience": [f"{live.url}/mcp"], "grant": [ALICE],
                              "grant_template": "org/acme/user/{principal}"}  # fmt: skip
    # a key trusts only what the deployment allows: the server fetches an issuer's keys, so no caller may choose
    # where it connects (here: a loopback address, the authorization server the test runs)
    refused = httpx.post(url, json=policy, headers=m)
    assert refused.status_code == 403 and "ENGRAM_OAUTH_ALLOWED_ISSUERS" in refused.json()["error"]["message"]
    sneaky = dict(policy, issuer="https://issuer.example", jwks_uri=f"{auth_server.issuer}/jwks")
    assert httpx.post(url, json=sneaky, headers=m).status_code == 403  # an allowed issuer, keys elsewhere
    monkeypatch.setattr(live.engram.settings, "oauth_allowed_issuers", [auth_server.issuer])
    made = httpx.post(url, json=policy, headers=m)
    assert made.status_code == 200, made.text
    assert made.json()["issuers"][0]["roles"] == ["agent"]
    listed = httpx.get(url, headers=m).json()["issuers"]
    assert auth_server.issuer in [i["issuer"] for i in listed]
    # a grant template: a token naming no grant gets the principal's own path
    token = auth_server.mint(aud=f"{live.url}/mcp", scope="engram:agent")
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "current_identity", "arguments": {}}}
    answer = httpx.post(live.url + "/mcp", json=call, headers=bearer(token)).json()
    assert answer["result"]["structuredContent"]["grant"] == [ALICE]
    # a policy reading the scopes from another claim (Auth0's `permissions`, a list)
    made = httpx.post(url, json=dict(policy, scope_claim="permissions", grant_template=None), headers=m)
    assert made.status_code == 200 and made.json()["issuers"][0]["scope_claim"] == "permissions"
    listed_token = auth_server.mint(aud=f"{live.url}/mcp", permissions=["engram:agent", f"engram:grant:{ALICE}"])
    answer = httpx.post(live.url + "/mcp", json=call, headers=bearer(listed_token)).json()
    assert answer["result"]["structuredContent"]["grant"] == [ALICE]
    wider = httpx.post(url, json=dict(policy, grant=["org/globex"]), headers=m)
    assert wider.status_code == 403  # beyond the management key's own grant
    bad = [
        dict(policy, issuer="http://issuer.example"),
        dict(policy, issuer="https://u:p@issuer.example"),
        dict(policy, grant_template="org/acme/{sub}"),
        dict(policy, roles=["root"]),
        dict(policy, audience=[]),
    ]
    for body in bad:
        assert httpx.post(url, json=body, headers=m).status_code == 400, body
    assert httpx.post(url, json=policy, headers=bearer(live.keys.agent)).status_code == 403
    # a manager of another region neither sees nor drops an issuer trusted for Alice's (not found, as if absent)
    narrow, _ = live.engram.identity.create_key(["acme"], "management", ["org/acme/user/bob"])
    assert auth_server.issuer not in [i["issuer"] for i in httpx.get(url, headers=bearer(narrow)).json()["issuers"]]
    dropped = httpx.request("DELETE", url, params={"issuer": auth_server.issuer}, headers=bearer(narrow))
    absent = httpx.request("DELETE", url, params={"issuer": "https://absent.example"}, headers=bearer(narrow))
    assert dropped.status_code == absent.status_code == 404
    assert dropped.json()["error"]["code"] == absent.json()["error"]["code"] == "issuer_not_found"
    narrowed = httpx.post(url, json=dict(policy, grant=["org/acme/user/bob"]), headers=bearer(narrow))
    assert narrowed.status_code == 409 and narrowed.json()["error"]["code"] == "in_use"  # Alice's tokens keep theirs
    listed = {i["issuer"]: i for i in httpx.get(url, headers=m).json()["issuers"]}
    assert listed[auth_server.issuer]["grant"] == [ALICE]
    assert auth_server.issuer in [i["issuer"] for i in httpx.get(url, headers=m).json()["issuers"]]
    assert httpx.request("DELETE", url, params={"issuer": auth_server.issuer}, headers=m).status_code == 200
    assert auth_server.issuer not in [i["issuer"] for i in httpx.get(url, headers=m).json()["issuers"]]
    assert httpx.post(live.url + "/mcp", json=LIST, headers=bearer(token)).status_code == 401


def test_the_key_cache_honours_expiry_by_the_wall_clock_and_fetches_only_policy_urls(
    auth_server: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a SnapStart restore relies on: cached keys carry a wall-clock expiry (the issuer's max-age, here
    600 s), so an environment restored later fetches them again; within it, no fetch. Discovery reads the
    issuer's RFC 8414 metadata; URLs that are not https (or loopback http) are never fetched."""
    from engram.kernel.errors import InvalidInput, Unavailable

    jwks.forget()
    source = jwks.HttpKeySource()
    now = [time.time()]
    monkeypatch.setattr(jwks.time, "time", lambda: now[0])
    before = auth_server.jwks_fetches
    assert source.keys(auth_server.issuer, None)[0]["kid"] == auth_server.kid  # discovered, then fetched
    source.keys(auth_server.issuer, None)
    now[0] += 599
    source.keys(auth_server.issuer, None)
    assert auth_server.jwks_fetches - before == 1
    now[0] += 2  # past max-age: as after a restore hours later
    source.keys(auth_server.issuer, None)
    assert auth_server.jwks_fetches - before == 2
    with pytest.raises(InvalidInput):
        source.keys("http://issuer.example", "http://issuer.example/jwks")
    with pytest.raises(Unavailable):
        source.keys("http://127.0.0.1:1", "http://127.0.0.1:1/jwks")  # nothing listens: 503, not a hang
    with pytest.raises(Unavailable):
        source.keys(auth_server.issuer, f"{auth_server.issuer}/authorize")  # not a JWKS (a 400 here)
    jwks.forget()
