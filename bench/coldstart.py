"""Cold-start proxy for every Lambda function: the import time of its handler module in a fresh
interpreter (median of 10; the module builds its adapters at import, as on Lambda), and the unzipped
size of the function with its layers as `sam build` makes them."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = {  # function -> layers it carries (with the local embedding model)
    "authorizer": ["EngramLayer"],
    "gateway": ["EngramLayer"],
    "identity": ["EngramLayer"],
    "memory": ["EngramLayer", "ModelLayer"],
    "knowledge": ["EngramLayer", "ModelLayer"],
    "worker": ["EngramLayer", "ModelLayer"],
}
PROBE = """
import importlib.util, json, sys, time
t0 = time.perf_counter()
import engram.api.lambda_runtime
t1 = time.perf_counter()
spec = importlib.util.spec_from_file_location("app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
t2 = time.perf_counter()
print(json.dumps({"total": (t2 - t0) * 1000, "libraries": (t1 - t0) * 1000, "build": (t2 - t1) * 1000}))
"""
ENV = {  # the template's environment, pointed nowhere: building adapters makes no request
    "ENGRAM_BACKEND": "aws",
    "ENGRAM_TABLE": "t",
    "ENGRAM_BUCKET": "b",
    "ENGRAM_QUEUE_URL": "http://127.0.0.1:9/123456789012/jobs",
    "ENGRAM_OPENSEARCH_URL": "http://127.0.0.1:9",
    "ENGRAM_OPENSEARCH_SERVICE": "none",
    "ENGRAM_FAMILY_FUNCTIONS": json.dumps({"memory": "m", "knowledge": "k", "identity": "i"}),
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "x",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def sam_build() -> Path:
    build = ROOT / ".aws-sam" / "build"
    if not (build / "EngramLayer").exists():
        sam = os.environ.get("SAM") or "sam"
        cmd = (
            sam.split()
            if sam != "sam" or _has("sam")
            else ["uv", "tool", "run", "--from", "aws-sam-cli==1.170.0", "sam"]
        )
        subprocess.run([*cmd, "build"], cwd=ROOT, check=True, capture_output=True)
    return build


def _has(program: str) -> bool:
    from shutil import which

    return which(program) is not None


def run(repeats: int = 10) -> dict[str, Any]:
    build = sam_build()
    out: dict[str, Any] = {}
    for i, (fn, layers) in enumerate(FUNCTIONS.items(), 1):
        print(f"  [{i}/{len(FUNCTIONS)}] {fn}", file=sys.stderr, flush=True)
        runs = []
        for _ in range(repeats):
            done = subprocess.run(
                [sys.executable, "-c", PROBE, str(ROOT / "functions" / fn / "app.py")],
                env={**os.environ, **ENV},
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        unzipped = size(build / f"{fn.capitalize()}Function") + sum(size(build / layer) for layer in layers)
        out[fn] = {
            "import_ms_median": round(statistics.median(r["total"] for r in runs)),
            "libraries_ms_median": round(statistics.median(r["libraries"] for r in runs)),
            "build_adapters_ms_median": round(statistics.median(r["build"] for r in runs)),
            "unzipped_mb": round(unzipped / 1e6, 1),
        }
    out["layers_mb"] = {layer: round(size(build / layer) / 1e6, 1) for layer in ("EngramLayer", "ModelLayer")}
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
