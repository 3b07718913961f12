"""The Lambda tests again, on CPython 3.13 (Lambda's runtime) with nothing but what `sam build` makes: each
function's artifact (its `app.py`) and the layers as their Makefiles build them — sourceless bytecode, stripped
shared objects, the pruned packages. `sam build` runs here with `LAMBDA_PLATFORM=x86_64-manylinux_2_28` (x86_64
wheels instead of Lambda's arm64 ones, same Makefiles and versions, into `.aws-sam/build-x86_64`), since an arm64
build cannot run here; boto3 stands in for the runtime's own copy. The run reuses this session's LocalStack,
moto and deployed stack (`tests.conftest.aws`).

This catches what the in-process tests on this venv cannot: a module the Makefiles prune that a code
path imports only when it runs, bytecode that 3.13 will not load, a package missing from every layer."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.aws_lambda.apigw import ROOT

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]

PY313 = next(
    (
        p
        for p in (
            shutil.which("python3.13"),
            *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"), reverse=True),
        )
        if p and subprocess.run([str(p), "-c", "pass"], capture_output=True).returncode == 0
    ),
    None,
)
LAYERS = {"engram": "EngramLayer", "web": "WebLayer", "docs": "DocsLayer", "model": "ModelLayer", "code": "CodeLayer"}
RUNTIME = ("boto3", "botocore", "s3transfer", "jmespath")  # what Lambda's Python runtime carries
HARNESS = ("pytest", "pytest-asyncio", "pyyaml", "uvicorn", "fpdf2", "httpx", "hypothesis")  # the tests' own needs


def _uv(*args: str) -> None:
    uv = os.environ.get("UV") or shutil.which("uv") or "uv"
    subprocess.run([uv, "pip", "install", "--quiet", *args], check=True, capture_output=True)


BUILT = ROOT / ".aws-sam" / "build-x86_64"


def sam() -> list[str]:
    """SAM CLI: $SAM, one on PATH, or the pinned one through uv (as the Makefile's `sam-build`)."""
    if os.environ.get("SAM"):
        return os.environ["SAM"].split()
    if shutil.which("sam"):
        return ["sam"]
    return [os.environ.get("UV") or shutil.which("uv") or "uv", "tool", "run", "--from", "aws-sam-cli==1.170.0", "sam"]


@pytest.fixture(scope="module")
def layers_here(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    env = {**os.environ, "LAMBDA_PLATFORM": "x86_64-manylinux_2_28", "SAM_CLI_TELEMETRY": "0"}
    run = subprocess.run(
        [*sam(), "build", "--build-dir", str(BUILT)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = tmp_path_factory.mktemp("layers")
    target = ("--python-platform", "x86_64-manylinux_2_28", "--python-version", "3.13", "--target")
    _uv(*target, str(out / "runtime"), "--no-deps", *(f"{p}=={version(p)}" for p in RUNTIME))
    _uv(*target, str(out / "harness"), *(f"{p}=={version(p)}" for p in HARNESS))
    return [BUILT / name / "python" for name in LAYERS.values()] + [out / "runtime", out / "harness"]


def test_the_lambda_tests_pass_on_python313_with_the_built_layers(
    layers_here: list[Path], endpoint: str, opensearch: str
) -> None:
    assert PY313 is not None, "no CPython 3.13 on this machine (PATH or pyenv): Lambda's runtime is 3.13"
    engram = layers_here[0]
    assert (engram / "pydantic" / "main.pyc").exists() and not (engram / "pydantic" / "main.py").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env |= {
        "PYTHONPATH": os.pathsep.join([*map(str, layers_here), str(ROOT)]),
        "PYTHONDONTWRITEBYTECODE": "1",  # /opt is read-only on Lambda
        "AWS_ENDPOINT_URL": endpoint,
        "OPENSEARCH_URL": opensearch,
        "BUILT_FUNCTIONS": str(BUILT),  # each function's app.py as sam build made it
        "ENGRAM_LAMBDA_FUZZ_EXAMPLES": "2",  # the fuzz here for the code paths it reaches on 3.13; its cases run above
    }
    here = Path(__file__)
    run = subprocess.run(
        [str(PY313), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here.parent), f"--ignore={here}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
