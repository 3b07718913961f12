"""#52: the console's figures, in headless Chromium (Debian's, driven by Playwright) against a local server holding
the browser tests' data: the first load's compressed size, each page's time to interactive (from the navigation
to the page showing what it loaded, median of 5), and the graph picture at 2,000 nodes and 5,000 edges (layout and
first draw as the page times it, and the frames a second while the camera pans)."""

from __future__ import annotations

import gzip
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.settings import Settings
from engram.wiring import build_local
from tests.browser.conftest import ALICE, BOB, CHROMIUM, FLAGS, mcp

BUILT = Path(__file__).resolve().parents[1] / "layers" / "engram" / "engram" / "console"
PAGES = ["overview", "memories", "search", "documents", "graph", "conversations", "audit", "erasure", "usage"]
PAN = """async () => {
  const frames = [];
  const start = performance.now();
  await new Promise((done) => {
    const step = (now) => { frames.push(now); if (now - start < 1000) requestAnimationFrame(step); else done(); };
    requestAnimationFrame(step);
    const canvas = document.querySelector('.graph canvas:last-of-type');
    const box = canvas.getBoundingClientRect();
    let x = box.left + box.width / 2, y = box.top + box.height / 2, n = 0;
    canvas.dispatchEvent(new MouseEvent('mousedown', {clientX: x, clientY: y, bubbles: true}));
    const drag = setInterval(() => {
      x += 6; y += 3; n += 1;
      canvas.dispatchEvent(new MouseEvent('mousemove', {clientX: x, clientY: y, bubbles: true}));
      if (n > 60) {
        clearInterval(drag);
        canvas.dispatchEvent(new MouseEvent('mouseup', {clientX: x, clientY: y, bubbles: true}));
      }
    }, 16);
  });
  const gaps = frames.slice(1).map((t, i) => t - frames[i]);
  return {fps: frames.length / ((frames.at(-1) - frames[0]) / 1000), worst_frame_ms: Math.max(...gaps)};
}"""


def sizes() -> dict[str, Any]:
    page = (BUILT / "index.html").read_text()
    first = [p for p in (BUILT / "assets").iterdir() if p.name in page]
    every = list((BUILT / "assets").iterdir())

    def kb(files: list[Path]) -> float:
        return round(sum(len(gzip.compress(f.read_bytes(), 9)) for f in files) / 1024, 1)

    return {"first_load_kb_gzip": kb([f for f in first if f.suffix in (".js", ".css")]),
            "everything_kb_gzip": kb([f for f in every if f.suffix in (".js", ".css")])}  # fmt: skip


def run(repeats: int = 5) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp)))
        engram.identity.register_scopes("acme", [ALICE, BOB])
        key, _ = engram.identity.create_key(["acme"], "management", ["org/acme"])
        with in_thread(create_app(engram)) as url, sync_playwright() as p:
            for n, text in enumerate(
                ["I live in Paris.", "I moved to Berlin.", "I work at Initech.", "My sister is Ana."]
            ):
                mcp(
                    url,
                    key,
                    "memory_store",
                    {"content": text, "scopes": [[ALICE]], "said_at": f"2026-0{n + 3}-01T09:00:00Z"},
                )
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            page = context.new_page()
            page.goto(url + "/console/")
            page.get_by_label("API key").fill(key)
            page.get_by_role("button", name="Sign in with a key").click()
            page.get_by_role("navigation", name="Console pages").wait_for()
            interactive: dict[str, float] = {}
            for name in PAGES:
                times = []
                for _ in range(repeats):
                    page.goto(url + "/console/#/overview" if name != "overview" else url + "/console/#/usage")
                    page.locator("#page-title").wait_for()
                    started = time.perf_counter()
                    page.goto(f"{url}/console/#/{name}")
                    page.locator("#page-title").wait_for()
                    page.wait_for_function("() => !document.body.innerText.includes('Loading…')")
                    if name == "graph":
                        page.get_by_test_id("graph-status").filter(has_text="drawn").wait_for()
                    times.append((time.perf_counter() - started) * 1000)
                interactive[name] = round(statistics.median(times), 1)
            graph: list[dict[str, float]] = []
            for _ in range(3):
                page.goto(url + "/console/#/overview")
                page.locator("#page-title").wait_for()
                started = time.perf_counter()
                page.goto(url + "/console/#/graph?synthetic=2000x5000")
                page.get_by_test_id("graph-status").filter(has_text="drawn").wait_for(timeout=60_000)
                wall = (time.perf_counter() - started) * 1000
                drawn = float(page.locator(".graph").get_attribute("data-render-ms") or "nan")
                panned = page.evaluate(PAN)
                graph.append({"in_page_ms": drawn, "navigation_to_drawn_ms": wall, **panned})
            browser.close()
    return {
        **sizes(),
        "interactive_ms_median": interactive,
        "graph_2000_nodes_5000_edges": {k: round(statistics.median(g[k] for g in graph), 1) for k in graph[0]},
        "browser": "Debian chromium, headless, software WebGL (SwiftShader)",
    }
