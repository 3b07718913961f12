"""The manual as a person reads it (issue #55): the built site opened in Chromium over plain HTTP — the home page and
a reference page render with their navigation, search answers offline, and nothing is fetched from another host.
Screenshots: tests/browser/out/manual-*.png."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, Request

from tests.browser.conftest import shot
from tests.unit.test_docs import build_site

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def manual(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = build_site(tmp_path_factory.mktemp("manual"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_home_page_and_a_reference_page_read_as_pages_offline(page: Page, manual: str) -> None:
    elsewhere: list[str] = []

    def record(request: Request) -> None:
        if not request.url.startswith(manual) and not request.url.startswith("data:"):
            elsewhere.append(request.url)

    page.on("request", record)
    page.goto(manual + "/index.html")
    assert page.title().startswith("Engram")
    nav = page.locator("nav.md-nav--primary")
    for section in ("Getting started", "Guides", "Security model", "Tool reference"):
        assert nav.get_by_text(section, exact=True).first.is_visible() or nav.get_by_text(section).count() > 0
    assert page.locator("img[src$='memories-as-of.png']").evaluate("i => i.naturalWidth") > 0  # the screenshot loads
    shot(page, "manual-home")

    page.goto(manual + "/reference/memory.html")
    heading = page.locator("h2#memory_recall")
    heading.wait_for()
    table = page.locator("xpath=//h2[@id='memory_recall']/following::table[1]")
    assert table.locator("code", has_text="query").count() >= 1  # the argument table, rendered
    shot(page, "manual-reference-memory")

    page.goto(manual + "/guides/erasure.html")
    page.locator("input.md-search__input, .md-search__input").first.click()
    page.keyboard.type("receipt")
    page.locator(".md-search-result__item").first.wait_for(timeout=10_000)  # search works from the page's own files
    assert not elsewhere, elsewhere
