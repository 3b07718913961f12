"""How `engram serve` and `engram stdio` set up their own process before any work: OpenBLAS's helper threads,
transparent huge pages for the model's weights, a garbage collector that skips what starting loaded (issue
#26). `engram.cli.main` calls these; nothing else in the package depends on them."""

from __future__ import annotations

import os
import sys

from engram.settings import Settings

HUGE_PAGES = "glibc.malloc.hugetlb=1"
BLAS_THREAD_TIMEOUT = "24"  # OpenBLAS's helper threads wait 2^24 cycles (~8 ms here) for more work, then sleep


def quiet_blas_threads() -> None:
    """numpy's OpenBLAS shares a large product between threads (the cosine over stored vectors: 0.46 ms on two,
    0.88 on one), then keeps its helpers spinning for 2^28 cycles, ~0.12 s here: a core burnt after every search,
    under the next call's query embedding on two threads. 2^24 (~8 ms) keeps them awake for a burst of reads
    (`read_code` every ~3 ms: 2.97 ms; 2^20 3.28, 2^4 3.42 — a wake per product) and asleep for part of a recall's
    embedding (`memory_recall` 9.31 ms; 8.84 with 2^20 or 2^4, 9.08 on one thread). Interleaved on one data folder
    of 10,000 memories and 1,945 files, all embedded (bench/RESULTS.md, #26, fifteenth session). OpenBLAS reads it
    when numpy loads, so this runs first; a value the environment sets is kept."""
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", BLAS_THREAD_TIMEOUT)


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


def settle() -> None:
    """What starting a server loaded (modules, schemas, settings, the model's wrappers) lives as long as the
    process: collected once, then moved out of the collector's generations, so a full collection — which stops
    every caller — walks only what came after (issue #26; bench/RESULTS.md)."""
    import gc

    gc.collect()
    gc.freeze()
