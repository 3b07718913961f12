"""#53: `engram backup` of a 1 GB local data folder while a client writes to the server using it: how long the copy
takes, how many writes were acknowledged meanwhile and how long they took (the backup must not stall writers), and
that the copy passes `check` (sizes, SHA-256s, SQLite's integrity check).

The folder: typed records of ~10 KB (every version is kept twice, as the latest and in the history) and blobs of
1 MB, made directly through the adapters; the writer: `memory_store` over MCP on `engram serve`, one call after
another. `python -m bench.backup [GB]`."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from engram.adapters.local.backup import backup, check
from engram.cli.devserver import cli, serve
from engram.kernel.ports import Write
from engram.settings import Settings
from engram.wiring import build_local

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def make(data: Path, gb: float) -> int:
    e = build_local(Settings(data_dir=data, embedder="none", queue_worker=False))
    body = os.urandom(5000).hex()  # 10 KB of text
    blobs = int(gb * 200)  # a fifth in blobs of 1 MB
    for i in range(blobs):
        e.blobs.put(f"bench/blob/{i}", os.urandom(1 << 20))
    records = int(gb * 0.8e9 / 2 / 10_300)
    now = datetime.now(UTC)
    for start in range(0, records, 500):
        e.records.transact([Write("bench", "record", f"rec_{i:07d}", {"body": body, "scopes": ["org/bench"]}, "bench")
                            for i in range(start, min(start + 500, records))], now)  # fmt: skip
    return sum(p.stat().st_size for p in data.rglob("*") if p.is_file())


def run(gb: float = 1.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "data")
        t0 = time.perf_counter()
        size = make(data, gb)
        made = time.perf_counter() - t0
        key = cli("keys", "create", "--context", "acme", "--principal", "agent", "--grant", "org/acme", data_dir=data)
        key = key.strip().splitlines()[-1]
        acks: list[tuple[float, float]] = []  # (acknowledged at, seconds the call took)
        stop = threading.Event()
        with serve(data) as url:

            def writer() -> None:
                n = 0
                with httpx.Client(timeout=60) as client:
                    while not stop.is_set():
                        args = {"name": "memory_store", "arguments": {"content": f"Note {n}: I am in Lisbon."}}
                        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": args}
                        t = time.perf_counter()
                        r = client.post(url + "/mcp", json=body, headers={**HEADERS, "Authorization": f"Bearer {key}"})
                        assert not r.json()["result"].get("isError")
                        acks.append((time.perf_counter(), time.perf_counter() - t))
                        n += 1

            thread = threading.Thread(target=writer)
            thread.start()
            time.sleep(5)
            began = time.perf_counter()
            manifest = backup(data, Path(tmp, "copy"))
            ended = time.perf_counter()
            time.sleep(2)
            stop.set()
            thread.join()
        checked = time.perf_counter()
        check(Path(tmp, "copy"))
        during = [s for at, s in acks if began <= at - s and at <= ended]
        before = [s for at, s in acks if at < began]
        out = {
            "data_gb": round(size / 1e9, 2), "made_s": round(made, 1), "backup_s": round(ended - began, 1),
            "databases_s": manifest["databases_seconds"], "copied_gb": round(manifest["bytes"] / 1e9, 2),
            "check_s": round(time.perf_counter() - checked, 1),
            "writes_during": len(during),
            "write_ms_p50_during": round(statistics.median(during) * 1000, 1) if during else None,
            "write_ms_max_during": round(max(during) * 1000, 1) if during else None,
            "write_ms_p50_before": round(statistics.median(before) * 1000, 1),
        }  # fmt: skip
        print(json.dumps(out), file=sys.stderr)
        return out


if __name__ == "__main__":
    print(json.dumps(run(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0), indent=2))
