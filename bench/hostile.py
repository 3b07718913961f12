"""Hostile input, measured (`BENCH=hostile`, issue #22) against `engram serve` over HTTP:

- `record_create` with the largest payload allowed (just under 64 KiB as JSON) against a schema with patterns:
  (a) 900 line items, each with four pattern-checked strings; (b) one 64 KiB string against `^(a+)+$` ending in
  `!` (a backtracking engine never finishes it). p50 / p99 over MCP, each beside a `record_get` (the floor:
  HTTP + MCP + a point read), and the validation alone in process.
- `write_code` of a 1 MiB file: (a) Python source (a real module of the package, repeated), (b) 1 MiB of
  `import` lines (~68,000). Median of a few writes over MCP, and what the background job then embeds.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.latency import mcp_call
from bench.records import timed
from engram.cli.devserver import cli, serve

PATTERNED = {
    "type": "order",
    "jsonSchema": {
        "type": "object",
        "properties": {
            "note": {"type": "string", "pattern": "^(a+)+$"},
            "lines": {"type": "array", "items": {"type": "object", "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$"},
                "code": {"type": "string", "pattern": "^(x+x+)+y$"},
                "name": {"type": "string", "pattern": "^[A-Za-z ]{1,40}$"},
                "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"]}},
        },
    },
    "indexMode": "none",
}  # fmt: skip
LIMIT = 64 * 1024


def _largest_lines() -> dict[str, Any]:
    line = {"sku": "ABC-1234", "email": "a.b@example.com", "code": "xxxxy", "name": "Widget thing", "qty": 3}
    n = (LIMIT - 100) // (len(json.dumps(line, separators=(",", ":"))) + 1)
    payload = {"lines": [line] * n}
    assert len(json.dumps(payload, separators=(",", ":"))) < LIMIT
    return payload


def _largest_string() -> dict[str, Any]:
    return {"note": "a" * (LIMIT - 20) + "!"}


def _in_process(payload: dict[str, Any], samples: int = 200) -> dict[str, float]:
    from engram.families.records import schema_rules

    compiled = schema_rules.validator(PATTERNED["jsonSchema"])
    return timed(samples, lambda _: schema_rules.first_error(compiled, payload))


def _writes(texts: dict[str, str], worker: bool, n: int = 5) -> dict[str, Any]:
    """`write_code` of each text n times over MCP on a fresh server. Without the queue worker the figure is
    the write's own path; with it, each write runs beside the embedding of the ones before (two cores)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        made = cli("keys", "create", "--context", "bench", "--principal", "agent", "--grant", "org/bench", data_dir=tmp)
        key = made.strip().splitlines()[-1]
        before = os.environ.get("ENGRAM_QUEUE_WORKER")
        os.environ["ENGRAM_QUEUE_WORKER"] = "true" if worker else "false"
        try:
            with serve(tmp) as url, httpx.Client(timeout=300, headers={"Authorization": f"Bearer {key}"}) as http:
                mcp_call(http, url, "write_code", {"path": "warm.py", "content": "import os\n", "reason": "warm"})
                for name, text in texts.items():
                    ms = []
                    for i in range(n):
                        args = {"path": f"big/{name}_{i % 2}.py", "content": text, "reason": "bench"}
                        t = time.perf_counter()
                        answer = mcp_call(http, url, "write_code", args)
                        ms.append((time.perf_counter() - t) * 1000)
                        assert not answer.get("isError"), str(answer)[:500]
                    out[name] = {
                        "bytes": len(text.encode()),
                        "lines": text.count("\n"),
                        "ms_each": [round(m, 1) for m in ms],
                        "median_ms": round(statistics.median(ms), 1),
                    }
        finally:
            if before is None:
                os.environ.pop("ENGRAM_QUEUE_WORKER", None)
            else:
                os.environ["ENGRAM_QUEUE_WORKER"] = before
    return out


def run(samples: int = 300) -> dict[str, Any]:
    out: dict[str, Any] = {}
    root = Path(__file__).resolve().parents[1] / "layers/engram/engram"
    modules = [p.read_text() for p in sorted(root.rglob("*.py"))]
    mib = 1 << 20
    python_mib, i = "", 0
    while len((python_mib + modules[i % len(modules)]).encode()) < mib:  # whole modules, so that it parses
        python_mib += modules[i % len(modules)]
        i += 1
    python_mib += "#" * (mib - len(python_mib.encode()) - 1) + "\n"
    imports_mib = "".join(f"import module_{i}\n" for i in range(mib // 17))[:mib]
    imports_mib = imports_mib[: imports_mib.rfind("\n") + 1]
    with tempfile.TemporaryDirectory() as tmp:
        keys = {}
        for role in ("management", "agent"):
            made = cli(
                "keys", "create", "--context", "bench", "--principal", role, "--grant", "org/bench", data_dir=tmp
            )
            keys[role] = made.strip().splitlines()[-1]
        with serve(tmp) as url, httpx.Client(timeout=300) as http:
            http.headers["Authorization"] = f"Bearer {keys['management']}"
            assert not mcp_call(http, url, "schemas_create", PATTERNED).get("isError")
            http.headers["Authorization"] = f"Bearer {keys['agent']}"
            lines, string = _largest_lines(), _largest_string()
            made = mcp_call(http, url, "record_create", {"type": "order", "payload": lines})
            assert not made.get("isError"), made
            rid = made["structuredContent"]["id"]
            refused = mcp_call(http, url, "record_create", {"type": "order", "payload": string})
            assert refused["structuredContent"]["error"]["code"] == "schema_violation"
            for _ in range(20):  # warm
                mcp_call(http, url, "record_get", {"id": rid})
            out["record_create"] = {
                "payload_bytes": {
                    "lines": len(json.dumps(lines, separators=(",", ":"))),
                    "string": len(json.dumps(string, separators=(",", ":"))),
                },
                "floor_record_get_ms": timed(samples, lambda _: mcp_call(http, url, "record_get", {"id": rid})),
                "largest_lines_ms": timed(
                    samples, lambda _: mcp_call(http, url, "record_create", {"type": "order", "payload": lines})
                ),
                "largest_catastrophic_string_refused_ms": timed(
                    samples, lambda _: mcp_call(http, url, "record_create", {"type": "order", "payload": string})
                ),
                "validation_in_process_ms": {"lines": _in_process(lines), "string": _in_process(string)},
            }
    out["write_code_1mib"] = {
        "write_path_alone": _writes({"python_source": python_mib, "import_lines": imports_mib}, worker=False),
        "beside_background_embedding": _writes({"python_source": python_mib, "import_lines": imports_mib}, True),
    }
    return out
