"""Typed records over HTTP against `engram serve` (`BENCH=records`, issue #14): N records of one schema with
three lookup fields (default 100,000; `BENCH_RECORDS` to change), created by four REST clients at once;
then p50/p99 of `record_get` and an exact lookup (MCP), a range page and a prefix page of 50 (REST: the MCP
cap is 10), and the first page of `version_history` of a record with 1,000 versions (MCP). DynamoDB's cost
of the same calls is stated in read units, from the item sizes measured here."""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.latency import mcp_call, pct
from engram.cli.devserver import cli, serve

SCHEMA = {
    "type": "asset",
    "jsonSchema": {
        "type": "object",
        "properties": {
            "serial": {"type": "string"},
            "site": {"type": "string"},
            "weight": {"type": "number"},
            "notes": {"type": "string"},
        },
        "required": ["serial", "site", "weight"],
    },
    "lookupFields": [
        {"field": "serial", "ops": ["exact", "prefix"]},
        {"field": "site", "ops": ["exact"]},
        {"field": "weight", "ops": ["range"]},
    ],
    "indexMode": "none",
}
SITES = [f"site-{n:03d}" for n in range(200)]


def payload(n: int) -> dict[str, Any]:
    return {"serial": f"SN{n:07d}", "site": SITES[n % len(SITES)], "weight": round((n * 7919) % 100_000 / 10, 1),
            "notes": f"Pump {n}, inspected quarterly."}  # fmt: skip


def timed(samples: int, call: Any) -> dict[str, float]:
    ms = []
    for i in range(samples):
        t = time.perf_counter()
        call(i)
        ms.append((time.perf_counter() - t) * 1000)
    return {"p50": pct(ms, 50), "p99": pct(ms, 99), "mean": round(statistics.mean(ms), 2)}


def run(samples: int = 300) -> dict[str, Any]:
    total = int(os.environ.get("BENCH_RECORDS", "100000"))
    rng = random.Random(11)
    with tempfile.TemporaryDirectory() as tmp:
        out = cli("keys", "create", "--context", "bench", "--principal", "agent", "--grant", "org/bench", data_dir=tmp)
        key = out.strip().splitlines()[-1]
        (Path(tmp) / "asset.json").write_text(json.dumps(SCHEMA))
        cli("schemas", "create", "--context", "bench", str(Path(tmp) / "asset.json"), data_dir=tmp)
        headers = {"Authorization": f"Bearer {key}"}
        with serve(tmp) as url, httpx.Client(headers=headers, timeout=120) as http:
            rest = f"{url}/api/v1/bench"
            ids: list[str] = [""] * total
            t0 = time.perf_counter()

            def load(worker: int) -> None:
                with httpx.Client(headers=headers, timeout=120) as own:
                    for n in range(worker, total, 4):
                        r = own.post(f"{rest}/records", json={"type": "asset", "payload": payload(n)})
                        r.raise_for_status()
                        ids[n] = r.json()["id"]
                        if n % 10_000 == 0:
                            print(f"  created {n}/{total}", file=sys.stderr, flush=True)

            threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            load_s = time.perf_counter() - t0
            picks = [rng.randrange(total) for _ in range(samples)]

            def get(i: int) -> None:
                assert mcp_call(http, url, "record_get", {"id": ids[picks[i]]})["structuredContent"]["id"]

            def exact(i: int) -> None:
                args = {"type": "asset", "field": "serial", "value": f"SN{picks[i]:07d}"}
                assert len(mcp_call(http, url, "record_query", args)["structuredContent"]["items"]) == 1

            def ranged(i: int) -> None:
                low = (picks[i] % 9000) + 0.5
                body = {"type": "asset", "field": "weight", "from": low, "to": low + 1000, "limit": 50}
                r = http.post(f"{rest}/records/lookup", json=body)
                assert len(r.json()["items"]) == 50, r.text

            def prefix(i: int) -> None:
                body = {"type": "asset", "field": "serial", "op": "prefix", "value": f"SN{picks[i]:07d}"[:5],
                        "limit": 50, "order": "desc" if i % 2 else "asc"}  # fmt: skip
                r = http.post(f"{rest}/records/lookup", json=body)
                assert len(r.json()["items"]) == 50, r.text

            result: dict[str, Any] = {
                "records": total,
                "create_per_s_4_clients": round(total / load_s, 1),
                "record_get_ms_mcp": timed(samples, get),
                "exact_lookup_ms_mcp": timed(samples, exact),
                "range_page_50_ms_rest": timed(samples, ranged),
                "prefix_page_50_ms_rest": timed(samples, prefix),
            }
            target = ids[0]
            for v in range(2, 1001):
                r = http.patch(f"{rest}/records/{target}", json={"payload": dict(payload(0), notes=f"revision {v}")})
                r.raise_for_status()
            first = mcp_call(http, url, "version_history", {"id": target})["structuredContent"]
            assert first["version"] == 1000 and len(first["versions"]) == 20
            result["version_history_first_page_ms_at_1000_versions"] = timed(
                samples, lambda i: mcp_call(http, url, "version_history", {"id": target})
            )
            record_bytes = len(json.dumps(mcp_call(http, url, "record_get", {"id": target})["structuredContent"]))
        result["record_json_bytes"] = record_bytes
        result["dynamodb_read_units"] = dynamodb_units(record_bytes)
        return result


def dynamodb_units(record_bytes: int) -> dict[str, float]:
    """Read units per call on DynamoDB (on-demand: one unit = a strongly consistent read of up to 4 KB, or two
    eventually consistent ones), from the item sizes: a record item is its JSON plus ~300 bytes of keys and
    attributes; a lookup entry ~250 bytes (key, owner id)."""
    item = record_bytes + 300
    per_record = -(-item // 4096)  # strongly consistent: BatchGetItem / GetItem with ConsistentRead
    entries = lambda n: max(0.5, -(-(n * 250) // 4096) / 2)  # noqa: E731  (GSI queries are eventually consistent)
    return {
        "record_get": per_record,
        "exact_lookup": entries(2) + per_record,
        "range_page_50": entries(51) + 50 * per_record,
        "prefix_page_50": entries(51) + 50 * per_record,
        "version_history_page_20": 1 + -(-(21 * item) // 4096),
    }
