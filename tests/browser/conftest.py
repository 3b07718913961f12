"""The console in a real browser (#52): Debian's Chromium, headless, driven by Playwright (its own browser downloads
fail on these machines; `make browser` installs Debian's package when it is missing), against a live Engram whose
data was stored through MCP first. Each test saves a screenshot of the page it looked at (tests/browser/out/)."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.settings import Settings
from engram.wiring import Engram, build_local
from tests.fixtures.files import RETURNS_PDF, make_pdf

OUT = Path(__file__).with_name("out")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--enable-unsafe-swiftshader"]  # fmt: skip
ALICE, BOB = "org/acme/user/alice", "org/acme/user/bob"
HOSTILE = '<img src=x onerror="window.__pwned = 1"> <script>window.__pwned = 2</script> javascript:window.__pwned=3'


@dataclass
class Site:
    url: str
    engram: Engram
    manager: str  # the whole context
    bob: str  # an agent of bob's region only
    tmp: Path


def mcp(url: str, key: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tools/call over MCP's HTTP transport: how the tests store what the pages must then show."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    answer = httpx.post(url + "/mcp", json=body, headers=headers, timeout=120).json()["result"]
    assert not answer.get("isError"), answer
    return dict(answer["structuredContent"])


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("console")
    engram = build_local(Settings(data_dir=tmp / "data"))
    engram.identity.register_scopes("acme", [ALICE, BOB])
    manager, _ = engram.identity.create_key(["acme"], "management", ["org/acme"])
    bob, _ = engram.identity.create_key(["acme"], "agent", [BOB])
    with in_thread(create_app(engram)) as url:
        alice = [[ALICE]]
        mcp(
            url,
            manager,
            "memory_store",
            {"content": "I live in Paris.", "scopes": alice, "said_at": "2026-03-01T09:00:00Z"},
        )
        mcp(
            url,
            manager,
            "memory_store",
            {"content": "I moved to Berlin.", "scopes": alice, "said_at": "2026-06-01T09:00:00Z"},
        )
        mcp(url, manager, "memory_store", {"content": "I work at Initech as a software engineer.", "scopes": alice})
        mcp(url, manager, "memory_store", {"content": f"My nickname is {HOSTILE}", "scopes": alice})
        mcp(url, bob, "memory_store", {"content": "I live in Madrid and I work at Globex."})
        pdf = base64.b64encode(make_pdf(RETURNS_PDF)).decode()
        mcp(url, manager, "document_upload", {"bytes_base64": pdf, "title": "Returns policy", "filename": "returns.pdf",
                                              "scopes": alice})  # fmt: skip
        mcp(url, manager, "conversation_append", {"thread_id": "support-1", "role": "user", "content": HOSTILE})
        mcp(url, manager, "schemas_create", {"type": "ticket", "jsonSchema": {"type": "object"}})
        made = mcp(url, manager, "record_create", {"type": "ticket", "payload": {"state": "open", "title": "Printer"}})
        mcp(url, manager, "record_update", {"id": made["id"], "payload": {"state": "closed", "title": "Printer"}})
        engram.queue.join()
        yield Site(url, engram, manager, bob, tmp)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Module scope, not session: Playwright's sync API keeps an asyncio loop running on this thread while
    # it is open, and every async test collected after this module would find it ("Runner.run() cannot
    # be called from a running event loop").
    assert Path(CHROMIUM).exists(), "no Chromium here: `make browser` installs Debian's chromium package"
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda exc: problems.append(str(exc)))
    opened.on(
        "console",
        lambda m: (
            problems.append(m.text) if m.type == "error" and "401" not in m.text and "403" not in m.text else None
        ),
    )
    yield opened
    context.close()
    csp = [p for p in problems if "Content Security Policy" in p]
    assert not csp, csp  # nothing the console does may need more than its policy allows


def sign_in(page: Page, site: Site, key: str) -> None:
    page.goto(site.url + "/console/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in with a key").click()
    page.get_by_role("navigation", name="Console pages").wait_for()


def shot(page: Page, name: str) -> Path:
    OUT.mkdir(exist_ok=True)
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def axe(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands (the console's own npm copy)."""
    source = Path(__file__).resolve().parents[2] / "console" / "node_modules" / "axe-core" / "axe.min.js"
    assert source.exists(), "axe-core comes with the console's npm packages (make console)"
    page.evaluate(source.read_text() + "\n;0")  # through the debugger protocol: not an inline script the CSP refuses
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [{"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:3]}
            for v in json.loads(json.dumps(found)) if v["impact"] in ("serious", "critical")]  # fmt: skip
