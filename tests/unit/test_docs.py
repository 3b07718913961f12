"""The manual (issue #55): the site builds with `--strict` (no broken link or anchor), offline, and its generated
reference names every tool (and every seed alias), its REST route, and every setting's environment variable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram.families import select
from engram.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def build_site(out: Path) -> Path:
    """`mkdocs build --strict` of the manual into `out` (offline: no network on PATH's side either)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_site(tmp_path_factory.mktemp("site"))


def _text(page: Path) -> str:
    return re.sub(r"<[^>]+>", " ", page.read_text())


def test_every_tool_and_alias_is_in_its_familys_reference(site: Path) -> None:
    for op in select():
        page = _text(site / "reference" / f"{op.family}.html")
        for name in op.names:
            assert f" {name} " in page or f"{name}" in page.split(), f"{name} missing from {op.family}'s page"
        assert op.path in page, f"{op.name}'s route {op.path} missing"


def test_every_argument_of_every_tool_is_described(site: Path) -> None:
    for op in select():
        page = (site / "reference" / f"{op.family}.html").read_text()
        section = page[page.index(f'id="{op.name}"') :]
        section = section[: section.find("<h2", 1)] if "<h2" in section[1:] else section
        for field in op.input.model_json_schema().get("properties", {}):
            assert f"<code>{field}</code>" in section, f"{op.name}: argument {field} missing"


def test_every_setting_is_in_the_settings_reference(site: Path) -> None:
    page = _text(site / "reference" / "settings.html")
    for name in Settings.model_fields:
        assert f"ENGRAM_{name.upper()}" in page


def test_the_site_needs_no_network(site: Path) -> None:
    for page in site.rglob("*.html"):
        html = page.read_text()
        assert "fonts.googleapis.com" not in html and "cdn.jsdelivr.net" not in html, page


def test_the_readme_is_short_and_its_links_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links to {target}, which is not there"


def test_the_benchmarks_page_carries_the_targets_table(site: Path) -> None:
    page = _text(site / "benchmarks.html")
    assert "LoCoMo hybrid recall@10" in page and "not met" in page
