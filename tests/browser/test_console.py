"""The console as a person sees it (#52), in headless Chromium: sign in (a key; OAuth with PKCE), every page shows
what the API holds, search's three lists, the graph drawn, a PDF uploaded and its passage found, an erasure from
preview to a receipt the browser verifies, a narrower key seeing less, hostile content staying text, and no
serious or critical accessibility violation on any page."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Site, axe, shot, sign_in
from tests.fixtures.files import make_pdf

PAGES = ["overview", "memories", "search", "documents", "graph", "conversations", "audit", "erasure", "usage"]


def visit(page: Page, site: Site, name: str) -> None:
    page.goto(f"{site.url}/console/#/{name}")
    page.locator("#page-title").wait_for()
    page.wait_for_load_state("networkidle")


@pytest.mark.parametrize("name", PAGES)
def test_every_page_is_interactive_accessible_and_screenshot(page: Page, site: Site, name: str) -> None:
    sign_in(page, site, site.manager)
    started = time.perf_counter()
    visit(page, site, name)
    expect(page.locator(".error")).to_have_count(0)
    took = time.perf_counter() - started
    assert took < 5, f"{name} took {took:.2f} s"  # generous here; the figure is measured in BENCH=console
    assert axe(page) == [], name
    shot(page, name)


def test_sign_in_with_a_key_keeps_it_in_the_tab_only(page: Page, site: Site) -> None:
    sign_in(page, site, site.manager)
    stored = page.evaluate("() => [sessionStorage.getItem('engram.token'), localStorage.length, document.cookie]")
    assert stored == [site.manager, 0, ""]
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('engram.token')") is None


def test_a_wrong_key_is_refused(page: Page, site: Site) -> None:
    page.goto(site.url + "/console/")
    page.get_by_label("API key").fill("sk-not-a-key")
    page.get_by_role("button", name="Sign in with a key").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")


def test_memories_show_the_validity_windows_and_what_was_true_then(page: Page, site: Site) -> None:
    sign_in(page, site, site.manager)
    visit(page, site, "memories")
    paris = page.locator("[data-fact]", has_text="Paris")
    berlin = page.locator("[data-fact]", has_text="Berlin")
    expect(paris).to_have_count(1)
    expect(berlin).to_have_count(1)
    assert "until" in (paris.get_attribute("aria-label") or "") and "until" not in (
        berlin.get_attribute("aria-label") or ""
    )
    truths = page.get_by_test_id("true-then")
    expect(truths).to_contain_text("Berlin")
    slider = page.get_by_role("slider")
    low = float(slider.get_attribute("min") or 0)
    march = 1_775_000_000_000  # 2026-04-01: between the two statements
    slider.evaluate(
        f"(el) => {{ el.value = {max(low, march)}; el.dispatchEvent(new Event('input', {{bubbles: true}})); }}"
    )
    expect(truths).to_contain_text("Paris")
    expect(truths).not_to_contain_text("Berlin")
    paris.click()
    expect(page.get_by_role("complementary", name="The fact's history")).to_contain_text("I live in Paris.")
    shot(page, "memories-as-of")


def test_search_shows_three_lists_with_their_ranks(page: Page, site: Site) -> None:
    sign_in(page, site, site.manager)
    visit(page, site, "search")
    page.get_by_label("Query").fill("where does she live")
    page.get_by_role("button", name="Search").click()
    lists = page.get_by_test_id("search-lists")
    for mode in ("bm25", "vector", "hybrid"):
        expect(lists.locator(f"[data-mode={mode}] h2")).to_have_text(mode)
    expect(lists.locator("[data-mode=vector] .hit").first).to_be_visible()
    expect(lists.locator("[data-mode=hybrid] .rank").first).to_contain_text("#")
    page.get_by_label("In", exact=True).select_option("documents")
    page.get_by_label("Query").fill("returned within 30 days")
    page.get_by_role("button", name="Search").click()
    first = lists.locator("[data-mode=hybrid] .hit").first
    expect(first).to_contain_text("30 days")
    expect(first.locator("mark").first).to_be_visible()  # the passage's words highlighted
    shot(page, "search-explained")


def test_the_graph_draws_the_callers_entities(page: Page, site: Site) -> None:
    sign_in(page, site, site.manager)
    visit(page, site, "graph")
    status = page.get_by_test_id("graph-status")
    expect(status).to_contain_text("laid out and drawn")
    box = page.locator(".graph")
    names = page.evaluate("() => 0")
    assert int(box.get_attribute("data-nodes") or 0) >= 3 and names == 0
    assert page.locator(".graph canvas").count() >= 1
    shot(page, "graph")


def test_a_pdf_uploaded_in_the_browser_is_found_with_its_passage(page: Page, site: Site) -> None:
    sign_in(page, site, site.manager)
    visit(page, site, "documents")
    pdf = site.tmp / "handbook.pdf"
    pdf.write_bytes(make_pdf([["Handbook", "Vacation requests go to the team lead two weeks ahead."]]))
    page.locator("input[type=file]").set_input_files(str(pdf))
    expect(page.get_by_role("status").last).to_contain_text("handbook.pdf: ")
    site.engram.queue.join()
    visit(page, site, "search")
    page.get_by_label("In", exact=True).select_option("documents")
    page.get_by_label("Query").fill("vacation requests team lead")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_test_id("search-lists").locator("[data-mode=hybrid] .hit").first).to_contain_text("two weeks")


def test_an_erasure_ends_in_a_receipt_the_browser_verifies(page: Page, site: Site) -> None:
    e = site.engram
    e.identity.register_scopes("acme", ["org/acme/user/carol"])
    from tests.browser.conftest import mcp

    mcp(site.url, site.manager, "memory_store", {"content": "I live in Oslo.", "scopes": [["org/acme/user/carol"]]})
    sign_in(page, site, site.manager)
    visit(page, site, "erasure")
    page.get_by_label("Scope to erase").fill("org/acme/user/carol")
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("table")).to_contain_text("memory")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Erase").click()
    check = page.get_by_test_id("receipt-check")
    expect(check).to_contain_text("verified in this browser", timeout=60_000)
    expect(page.get_by_role("link", name="Download the receipt")).to_be_visible()
    shot(page, "erasure-receipt")


def test_a_narrower_key_does_not_see_what_it_may_not(page: Page, site: Site) -> None:
    sign_in(page, site, site.bob)
    visit(page, site, "memories")
    expect(page.locator("[data-fact]", has_text="Madrid")).to_have_count(1)
    expect(page.locator("[data-fact]", has_text="Paris")).to_have_count(0)
    visit(page, site, "graph")
    expect(page.get_by_test_id("graph-status")).to_contain_text("laid out and drawn")
    visit(page, site, "audit")
    expect(page.locator(".error").first).to_contain_text("may not see")  # the trail is a manager's
    shot(page, "narrower-key")


def test_hostile_content_stays_text(page: Page, site: Site) -> None:
    sign_in(page, site, site.manager)
    visit(page, site, "search")
    page.get_by_label("Query").fill("what is my nickname")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_test_id("search-lists").locator("[data-mode=bm25]")).to_contain_text("<img src=x onerror")
    visit(page, site, "conversations")
    page.get_by_label("Thread id").fill("support-1")
    page.get_by_role("button", name="Open").first.click()
    expect(page.locator(".messages")).to_contain_text("<script>")
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0 and page.locator("a[href^=javascript]").count() == 0


def test_the_policy_and_headers_hold(site: Site) -> None:
    import httpx

    answer = httpx.get(site.url + "/console/")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert answer.headers["x-frame-options"] == "DENY" and '<script type="module"' in answer.text
    assert "<script>" not in answer.text  # no inline script in the page
    assert httpx.get(site.url + "/console", follow_redirects=False).headers["location"] == "/console/index.html"


def test_sign_in_with_oauth_authorization_code_and_pkce(page: Page, site: Site) -> None:
    """The console as a public client of the context's trusted issuer: discovery from the protected resource
    metadata, dynamic registration, the code flow with PKCE (S256), then the token used as a key is."""
    from engram.adapters import jwks
    from tests.oauth_server import running_auth_server

    with running_auth_server() as server:
        policy = {"issuer": server.issuer, "audience": [f"{site.url}/api/v1", f"{site.url}/mcp"],
                  "grant": ["org/acme/user"], "roles": ["agent"]}  # fmt: skip
        site.engram.identity.trust_issuer(None, policy, "acme")
        jwks.forget()
        try:
            page.goto(site.url + "/console/")
            page.get_by_role("button", name="Sign in with OAuth").click()
            page.get_by_role("navigation", name="Console pages").wait_for(timeout=30_000)
            expect(page.locator(".who")).to_contain_text("agent")
            issued = server.tokens_issued[-1]
            assert issued["resource"] == f"{site.url}/api/v1"
            token = page.evaluate("() => sessionStorage.getItem('engram.token')")
            assert token and token.count(".") == 2  # a JWT, not a key
            visit(page, site, "memories")
            expect(page.locator("[data-fact]", has_text="Berlin")).to_have_count(1)  # alice's region, through the token
            expect(page.locator("[data-fact]", has_text="Madrid")).to_have_count(0)  # bob's is not in its grant
            shot(page, "signed-in-with-oauth")
        finally:
            site.engram.identity.issuers.remove("acme", server.issuer)
