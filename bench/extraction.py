"""#50: what the learned extractor costs a stored turn, as a client sees it: two `engram serve` processes on data
folders filled alike, one reading turns with the learned extractor beside the rules (`ENGRAM_EXTRACTOR=learned`,
the default) and one with the rules alone (`rules`); `memory_store` over MCP HTTP to each in turn, the order of
the pair alternating, so both meet the machine's same moments. The figure is the p50 of the paired differences."""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from contextlib import ExitStack
from typing import Any

import httpx

from bench.latency import mcp_call, pct
from bench.locomo import turns_and_questions
from engram.cli.devserver import cli, serve

MODES = ("learned", "rules")


def run(memories: int = 2_000, samples: int = 400) -> dict[str, Any]:
    turns, _ = turns_and_questions()
    rng = random.Random(11)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    diffs: list[float] = []
    found: dict[str, dict[str, int]] = {m: {"entities": 0, "relations": 0} for m in MODES}
    with ExitStack() as stack:
        clients: dict[str, tuple[httpx.Client, str]] = {}
        for mode in MODES:
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            out = cli("keys", "create", "--context", "bench", "--principal", "agent", "--grant", "org/bench",
                      data_dir=tmp)  # fmt: skip
            key = out.strip().splitlines()[-1]
            before = os.environ.get("ENGRAM_EXTRACTOR")
            os.environ["ENGRAM_EXTRACTOR"] = mode
            try:
                url = stack.enter_context(serve(tmp))
            finally:
                os.environ.pop("ENGRAM_EXTRACTOR")
                if before is not None:
                    os.environ["ENGRAM_EXTRACTOR"] = before
            http = stack.enter_context(httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120))
            clients[mode] = (http, url)
            for start in range(0, memories, 100):
                batch = [{"content": turns[(start + i) % len(turns)], "session_id": f"s{(start + i) // 20}"}
                         for i in range(min(100, memories - start))]  # fmt: skip
                http.post(url + "/api/v1/bench/facts/batch", json={"turns": batch}).raise_for_status()
        for n in range(samples + 20):
            text = rng.choice(turns)
            took: dict[str, float] = {}
            for mode in MODES if n % 2 else reversed(MODES):
                http, url = clients[mode]
                t = time.perf_counter()
                res = mcp_call(http, url, "memory_store", {"content": text, "session_id": f"bench{n % 7}"})
                took[mode] = (time.perf_counter() - t) * 1000
                body = res["structuredContent"]
                found[mode]["entities"] += len(body.get("entities", []))
                found[mode]["relations"] += len(body.get("relations", []))
            if n >= 20:  # the first twenty warm both servers
                for mode in MODES:
                    times[mode].append(took[mode])
                diffs.append(took["learned"] - took["rules"])
    return {
        "memories": memories,
        "samples": samples,
        "store_ms": {m: {"p50": pct(times[m], 50), "p99": pct(times[m], 99)} for m in MODES},
        "added_ms": {"p50": pct(diffs, 50), "mean": round(statistics.mean(diffs), 2), "p90": pct(diffs, 90)},
        "found": found,
    }
