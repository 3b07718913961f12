"""Cold starts the way Lambda pays them with SnapStart (issue #16), per function, over moto and the OpenSearch
node, each run in a fresh interpreter (tests/aws_lambda/snapstart_probe.py; median of REPEATS):

- import + before-snapshot: what publishing a version pays, once;
- after-restore + first request: what a cold request pays on top of Lambda's own restore (target: at most
  twice the warm request);
- the warm request, for comparison;

and the unzipped size of each function with its layers as `sam build` makes them, beside the import time
of its handler module with only its layers importable (tests/aws_lambda/layers.py)."""

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


LIFECYCLE: list[str] = ["authorizer", "gateway", "identity", "context", "entities", "records", "conversation", "memory",
             "knowledge", "workspace", "worker"]  # fmt: skip


def lifecycle(repeats: int = 3) -> dict[str, Any]:
    """Init, before-snapshot, after-restore, first and warm request of every function (median ms)."""
    import uuid

    import boto3

    from engram.adapters.aws.dynamodb_records import DynamoRecordStore
    from engram.api.auth import authorizer_context
    from engram.settings import Settings
    from engram.wiring import build_identity
    from tests.aws import aws_endpoint
    from tests.opensearch import opensearch_node

    probe = ROOT / "tests" / "aws_lambda" / "snapstart_probe.py"
    out: dict[str, Any] = {}
    with aws_endpoint() as endpoint, opensearch_node() as opensearch:
        name = f"engram-bench-{uuid.uuid4().hex[:6]}"
        env = {"AWS_ENDPOINT_URL": endpoint, "ENGRAM_BACKEND": "aws", "ENGRAM_TABLE": name, "ENGRAM_BUCKET": name,
               "ENGRAM_OPENSEARCH_URL": opensearch, "ENGRAM_OPENSEARCH_SERVICE": "none",
               "ENGRAM_OPENSEARCH_INDEX": name, "ENGRAM_DNS_REBINDING_PROTECTION": "false",
               "ENGRAM_FAMILY_FUNCTIONS": "{}", "POWERTOOLS_TRACE_DISABLED": "true",
               "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        os.environ.update(env)
        DynamoRecordStore.create_table(boto3.client("dynamodb", region_name="us-east-1"), name)
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=name)
        env["ENGRAM_QUEUE_URL"] = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName=name)["QueueUrl"]
        os.environ["ENGRAM_QUEUE_URL"] = env["ENGRAM_QUEUE_URL"]
        key, principal = build_identity(Settings()).create_key(["acme"], "agent", ["org/acme"])
        auth = json.dumps({"key": key, "context": authorizer_context(principal)})
        for fn in LIFECYCLE:
            runs = []
            for _ in range(repeats):
                done = subprocess.run([sys.executable, str(probe), fn, auth], cwd=ROOT, capture_output=True, text=True,
                                      env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, check=True)  # fmt: skip
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))

            def med(field: str, runs: list[dict[str, Any]] = runs) -> float:
                return round(statistics.median(r[field] for r in runs), 1)

            cold = round(statistics.median(r["after_restore_ms"] + r["first_request_ms"] for r in runs), 1)
            warm = med("warm_request_ms")
            out[fn] = {"init_ms": med("init_ms"), "before_snapshot_ms": med("before_snapshot_ms"),
                       "after_restore_ms": med("after_restore_ms"), "first_request_ms": med("first_request_ms"),
                       "restore_plus_first_ms": cold, "warm_request_ms": warm,
                       "cold_over_warm": round(cold / max(warm, 1e-9), 2)}  # fmt: skip
            print(f"  {fn}: {out[fn]}", file=sys.stderr, flush=True)
    return out


def run(repeats: int = 10) -> dict[str, Any]:
    return {"snapstart": lifecycle(), "import_and_size": sizes(repeats)}


def sizes(repeats: int = 10) -> dict[str, Any]:
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
