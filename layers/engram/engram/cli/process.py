"""How `engram serve` and `engram stdio` set up their own process before any work: transparent huge pages for the
model's weights, a garbage collector that skips what starting loaded (issue #26). `engram.cli.main` calls these;
nothing else in the package depends on them. (numpy's BLAS is put on one thread by the local engine itself:
`engram.wiring.one_blas_thread`.)"""

from __future__ import annotations

import os
import sys
from typing import Any

from engram.settings import Settings

HUGE_PAGES = "glibc.malloc.hugetlb=1"


def with_huge_pages(settings: Settings) -> None:
    """Start this same command again (same process id) with glibc's malloc asking for transparent huge pages
    (`madvise`) for its large blocks, unless it already does or the setting is off. The embedding model's ~42 MB
    of float weights, read through at every query, then sit on 2 MiB pages rather than 4 KiB ones: a query
    embedding 4.9 -> 3.8 ms here, the same vectors (bench/RESULTS.md, issue #26). A libc that is not glibc
    ignores the variable."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if settings.huge_pages and sys.platform.startswith("linux") and "glibc.malloc.hugetlb" not in tunables:
        os.environ["GLIBC_TUNABLES"] = f"{tunables}:{HUGE_PAGES}" if tunables else HUGE_PAGES
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, sys.orig_argv)


def http_options() -> dict[str, Any]:
    """How uvicorn parses HTTP for every `engram serve` process (one, or each of `--workers`'). h11 whatever else is
    installed: it trims header values (an `Mcp-Name` with spaces around it), and requests httptools refuses with a
    plain-text 400 reach the app, which answers them in the seed's error shape (tests/e2e: conformance, fuzz); a
    request's head is held to the edge's limit."""
    from engram.api.edge import MAX_HEAD_BYTES

    return {"http": "h11", "h11_max_incomplete_event_size": MAX_HEAD_BYTES}


def settle() -> None:
    """What starting a server loaded (modules, schemas, settings, the model's wrappers) lives as long as the
    process: collected once, then moved out of the collector's generations, so a full collection — which stops
    every caller — walks only what came after (issue #26; bench/RESULTS.md)."""
    import gc

    gc.collect()
    gc.freeze()
