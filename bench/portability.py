"""#53: whole-context export and import throughput (objects/s, MB/s) and peak memory, on a context of N objects
(default 100,000: typed records, a fifth of them with a second version, each with its index document and a
384-dimension vector), local SQLite to a file and the file into a fresh data folder. Each side runs in a process
of its own so its peak RSS is its own; the same at N/10 shows whether memory stays flat as the context grows.

`python -m bench.portability [N]`."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engram.kernel.ports import IndexDoc, Write
from engram.settings import Settings
from engram.wiring import build_local

CONTEXT = "bench"
WORDS = ["order", "parcel", "late", "refund", "invoice", "printer", "toner", "delivery", "Lisbon", "Paris",
         "contract", "renewal", "meeting"]  # fmt: skip


def make(data: Path, n: int) -> None:
    """A context of `n` records (a fifth with two versions), each indexed with a vector."""
    e = build_local(Settings(data_dir=data, embedder="none", queue_worker=False))
    rng = np.random.default_rng(7)
    now = datetime.now(UTC)
    for start in range(0, n, 1000):
        writes, docs = [], []
        for i in range(start, min(start + 1000, n)):
            text = " ".join(rng.choice(WORDS, 12))
            data_ = {"type": "ticket", "payload": {"title": f"ticket {i}", "body": text, "n": i},
                     "scopes": [f"org/bench/user/u{i % 50}"]}  # fmt: skip
            writes.append(Write(CONTEXT, "record", f"rec_{i:07d}", data_, "bench"))
            vector = rng.standard_normal(384).astype(np.float32)
            docs.append(IndexDoc(CONTEXT, "record", f"rec_{i:07d}", text, vector / np.linalg.norm(vector),
                                 data_["scopes"], None, None, {"type": "ticket"}))  # fmt: skip
        e.records.transact(writes, now)
        e.records.transact([Write(w.context_id, w.kind, w.id, {**w.data, "state": "closed"}, "bench")
                            for w in writes[::5]], now)  # fmt: skip
        e.index.upsert(docs)


def child(mode: str, data: str, file: str) -> None:
    """One side, in its own process: prints its counts, seconds and peak RSS (MB)."""
    from engram.transfer.archive import export, import_file

    e = build_local(Settings(data_dir=Path(data), embedder="none", queue_worker=False))
    t0 = time.perf_counter()
    if mode == "export":
        with open(file, "wb") as f:
            counts = export(e, CONTEXT, f)
    else:
        counts = import_file(e, Path(file))
    seconds = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"counts": counts.as_dict(), "seconds": seconds, "peak_rss_mb": rss}))


def side(mode: str, data: Path, file: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.portability", "--child", mode, str(data), str(file)],
                         check=True, capture_output=True, text=True)  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run(n: int = 100_000) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size in (n // 10, n):
        with tempfile.TemporaryDirectory() as tmp:
            src, dst, file = Path(tmp, "src"), Path(tmp, "dst"), Path(tmp, "ctx.jsonl.gz")
            t0 = time.perf_counter()
            make(src, size)
            made = time.perf_counter() - t0
            ex = side("export", src, file)
            im = side("import", dst, file)
            mb = file.stat().st_size / 1e6
            raw = ex["counts"]["bytes"] / 1e6
            objects = ex["counts"]["objects"] + ex["counts"]["docs"]
            results[str(size)] = {
                "objects": ex["counts"]["objects"], "index_docs": ex["counts"]["docs"], "file_mb": round(mb, 1),
                "json_mb": round(raw, 1), "made_s": round(made, 1),
                "export": {"s": round(ex["seconds"], 1), "objects_per_s": round(objects / ex["seconds"]),
                           "mb_per_s": round(raw / ex["seconds"], 1), "peak_rss_mb": round(ex["peak_rss_mb"])},
                "import": {"s": round(im["seconds"], 1), "objects_per_s": round(objects / im["seconds"]),
                           "mb_per_s": round(raw / im["seconds"], 1), "peak_rss_mb": round(im["peak_rss_mb"]),
                           "written": im["counts"]["written"]},
            }  # fmt: skip
            print(json.dumps({size: results[str(size)]}), file=sys.stderr, flush=True)
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:5])
    else:
        print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000), indent=2))
