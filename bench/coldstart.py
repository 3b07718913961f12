"""Cold-start proxy for every Lambda function: the import time of its handler module in a fresh
interpreter (median of 10; the module builds its adapters at import, as on Lambda) with only the packages
of its layers importable and the template's environment, and the unzipped size of the function with its
layers as `sam build` makes them (tests/aws_lambda/layers.py)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.aws_lambda.layers import function_layers, import_function

ROOT = Path(__file__).resolve().parents[1]


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def sam_build(layers: set[str]) -> Path:
    build = ROOT / ".aws-sam" / "build"
    if not all((build / layer).exists() for layer in layers):
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
    functions = function_layers()  # with the local model's layer
    build = sam_build({layer for names in functions.values() for layer in names})
    out: dict[str, Any] = {}
    for i, (fn, layers) in enumerate(functions.items(), 1):
        print(f"  [{i}/{len(functions)}] {fn}", file=sys.stderr, flush=True)
        runs = [import_function(fn, build) for _ in range(repeats)]
        unzipped = size(build / f"{fn.capitalize()}Function") + sum(size(build / layer) for layer in layers)
        out[fn] = {
            "import_ms_median": round(statistics.median(r["total"] for r in runs)),
            "libraries_ms_median": round(statistics.median(r["libraries"] for r in runs)),
            "build_adapters_ms_median": round(statistics.median(r["build"] for r in runs)),
            "unzipped_mb": round(unzipped / 1e6, 1),
        }
    layers = sorted({layer for names in functions.values() for layer in names})
    out["layers_mb"] = {layer: round(size(build / layer) / 1e6, 1) for layer in layers}
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
