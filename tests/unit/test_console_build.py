"""The console's committed build (#52): made from the sources as they are (a stale build fails here: `make console`),
complete (every file the page loads is there), with no inline script, and a first load within its budget."""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "layers" / "engram" / "engram" / "console"
sys.path.insert(0, str(ROOT / "infra"))
import console_stamp  # noqa: E402


def first_load() -> list[Path]:
    page = (BUILT / "index.html").read_text()
    return [
        BUILT / ref.removeprefix("/console/") for ref in re.findall(r'(?:src|href)="(/console/assets/[^"]+)"', page)
    ]


def test_the_committed_build_is_made_from_the_sources_as_they_are() -> None:
    assert console_stamp.main("check") == 0, "console/ changed since the committed build: run `make console`"


def test_the_page_loads_only_files_that_are_there_and_runs_no_inline_script() -> None:
    page = (BUILT / "index.html").read_text()
    files = first_load()
    assert files and all(f.is_file() for f in files)
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page) is None  # every script is a file (the CSP allows no other)
    assert "http://" not in page and "https://" not in page  # no CDN: nothing loads from elsewhere


def test_the_first_load_is_within_300_kb_compressed() -> None:
    size = sum(len(gzip.compress(f.read_bytes(), 9)) for f in first_load() if f.suffix in (".js", ".css"))
    assert size <= 300 * 1024, size
