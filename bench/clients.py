"""#54: one local server under many clients, and two tenants beside each other (`make bench BENCH=clients`).

- **The clients curve**: 1–64 clients, each its own HTTP connection sending MCP `tools/call`s back to back for
  `SECONDS`: `memory_recall` (k 10, a fresh LoCoMo question each time) and `memory_store` (a fresh LoCoMo turn,
  embedded for real), 4:1. Per count: calls/s, p50 / p99 of each tool (of every call, and `steady_*` of those sent
  after the first `WARMUP` seconds, once the clients' first calls, all sent at once, are answered), errors. The
  CPU-bound ceiling is what the server's own CPU time says: cores ÷ the server's CPU seconds per call at 1 client.
- **Two server processes** (`engram serve --workers 2`): 32 clients against a server of two processes over the same
  folder (after 16 clients for `SECONDS` to warm both), calls/s and tails as above.
- **Fair between tenants**: a quiet context's `memory_recall` p50 alone, then beside a noisy context sending
  `memory_recall` with k 100 from 12 threads, both contexts holding `MEMORIES` memories (filled as `bench.scale`).

`python -m bench.clients`."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.latency import mcp_call, pct
from bench.locomo import turns_and_questions
from bench.scale import corpus, fill, recall_times
from engram.cli.devserver import start, stop

MEMORIES = 10_000
SECONDS = 15.0
# The clients' first calls arrive together (n recalls at the same instant: at 32 clients the last waits ~0.9 s,
# 3 % of the run's recalls); the steady figures leave out the calls sent in the first WARMUP seconds
WARMUP = 2.0
COUNTS = (1, 2, 4, 8, 16, 32, 64)
NOISY_THREADS = 12
QUIET_SAMPLES = 200


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def clients(url: str, key: str, n: int, turns: list[str], questions: list[str]) -> dict[str, Any]:
    times: dict[str, list[float]] = {"memory_recall": [], "memory_store": []}
    steady: dict[str, list[float]] = {"memory_recall": [], "memory_store": []}  # calls sent after WARMUP
    errors: list[str] = []
    stored = [0]
    lock = threading.Lock()
    begun = time.perf_counter()
    deadline = begun + SECONDS

    def client(c: int) -> None:
        rng = random.Random(c)
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            i = 0
            while time.perf_counter() < deadline:
                i += 1
                args: dict[str, Any]
                if i % 5 == 0:
                    tool, args = "memory_store", {"content": f"{rng.choice(turns)} ({c}.{i})", "session_id": f"c{c}"}
                else:
                    tool, args = "memory_recall", {"query": f"{rng.choice(questions)} #{c}.{i}", "k": 10}
                t = time.perf_counter()
                try:
                    res = mcp_call(http, url, tool, args)
                    ok = not res.get("isError")
                except httpx.HTTPError as exc:
                    ok, res = False, {"error": repr(exc)}
                ms = (time.perf_counter() - t) * 1000
                with lock:
                    if ok:
                        times[tool].append(ms)
                        if t - begun >= WARMUP:
                            steady[tool].append(ms)
                        stored[0] += tool == "memory_store"
                    else:
                        errors.append(str(res)[:200])

    threads = [threading.Thread(target=client, args=(c,)) for c in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    done = sum(len(v) for v in times.values())
    return {
        "clients": n,
        "calls_per_s": round(done / wall, 1),
        "recall_p50_ms": pct(times["memory_recall"], 50),
        "recall_p99_ms": pct(times["memory_recall"], 99),
        "store_p50_ms": pct(times["memory_store"], 50) if times["memory_store"] else None,
        "store_p99_ms": pct(times["memory_store"], 99) if times["memory_store"] else None,
        "steady_recall_p50_ms": pct(steady["memory_recall"], 50),
        "steady_recall_p99_ms": pct(steady["memory_recall"], 99),
        "steady_store_p50_ms": pct(steady["memory_store"], 50) if steady["memory_store"] else None,
        "steady_store_p99_ms": pct(steady["memory_store"], 99) if steady["memory_store"] else None,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "stored": stored[0],
        "calls": done,
    }


def quiet_p50(url: str, key: str, questions: list[str], tag: str) -> float:
    """The quiet context's recall p50, its questions tagged `tag`: each measure asks its own (the same questions
    again would be answered from the recall cache)."""
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        return pct(recall_times(http, url, questions, QUIET_SAMPLES, tag), 50)


def fairness(url: str, quiet: str, noisy: str, questions: list[str]) -> dict[str, Any]:
    alone = quiet_p50(url, quiet, questions, "qa")
    stop_flag = threading.Event()
    sent = [0]

    def noise(t: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {noisy}"}, timeout=120) as http:
            i = 0
            while not stop_flag.is_set():
                i += 1
                query = f"{questions[(t * 97 + i) % len(questions)]} #n{i}"
                mcp_call(http, url, "memory_recall", {"query": query, "k": 100})
                sent[0] += 1

    threads = [threading.Thread(target=noise, args=(t,)) for t in range(NOISY_THREADS)]
    for t in threads:
        t.start()
    time.sleep(2)
    beside = quiet_p50(url, quiet, questions, "qb")
    stop_flag.set()
    for t in threads:
        t.join()
    return {"quiet_alone_p50_ms": alone, "quiet_beside_noisy_p50_ms": beside, "ratio": round(beside / alone, 2),
            "noisy_calls": sent[0]}  # fmt: skip


def two_workers(folder: Path, key: str, noisy: str, turns: list[str], questions: list[str]) -> dict[str, Any]:
    """`engram serve --workers 2` over the folder, both workers warmed first: the fair share beside the noisy
    context (of the machine: engram.trust.peers), then 32 clients."""
    proc, url = start(folder, timeout=600, workers=2)
    try:
        for ctx in (noisy, key):
            clients(url, ctx, 16, turns, questions)  # 16 connections: both workers load each context
        fair = fairness(url, key, noisy, questions)
        print(f"  workers 2, fairness: {fair}", file=sys.stderr, flush=True)
        return {**clients(url, key, 32, turns, questions), "fairness": fair}
    finally:
        stop(proc)


def run() -> dict[str, Any]:
    c = corpus()
    turns, questions = turns_and_questions()
    tmp = Path(tempfile.mkdtemp(prefix="engram-clients-"))
    out: dict[str, Any] = {"memories": MEMORIES, "seconds": SECONDS}
    try:
        key, _ = fill(tmp, c, 0, MEMORIES, None, "quiet")
        noisy, _ = fill(tmp, c, MEMORIES, 2 * MEMORIES, None, "noisy")
        proc, url = start(tmp, timeout=600)
        try:
            with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
                for i in range(20):
                    mcp_call(http, url, "memory_recall", {"query": f"{questions[i]} #w", "k": 10})
            out["fairness"] = fairness(url, key, noisy, questions)
            print(f"  fairness: {out['fairness']}", file=sys.stderr, flush=True)
            curve = []
            for n in COUNTS:
                cpu0 = cpu_seconds(proc.pid)
                row = clients(url, key, n, turns, questions)
                row["server_cpu_s_per_call"] = round((cpu_seconds(proc.pid) - cpu0) / max(1, row["calls"]), 5)
                curve.append(row)
                print(f"  {json.dumps(row)}", file=sys.stderr, flush=True)
            out["curve"] = curve
            cores = len(os.sched_getaffinity(0))
            out["ceiling_calls_per_s"] = round(cores / curve[0]["server_cpu_s_per_call"], 1)
        finally:
            stop(proc)
        out["workers_2"] = two_workers(tmp, key, noisy, turns, questions)
        print(f"  workers 2: {json.dumps(out['workers_2'])}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
