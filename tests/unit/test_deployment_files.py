"""template.yaml, the layers and the functions stay in step with the code: every family has a function,
every REST path a route, every locked dependency its layer; cfn-lint finds nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram.families import families, select
from tests.aws_lambda.apigw import ROOT, routes, template
from tests.aws_lambda.layers import function_layers, import_function, missing_modules


def test_generated_sections_of_the_template_are_current() -> None:
    run = subprocess.run(
        [sys.executable, "infra/template_routes.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_layer_requirements_match_the_lock() -> None:
    run = subprocess.run(
        [sys.executable, "infra/layer_requirements.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr


def test_each_function_carries_only_the_layers_it_imports() -> None:
    layers = function_layers()
    assert layers["authorizer"] == ["EngramLayer"]
    assert "ModelLayer" not in layers["gateway"] + layers["identity"]
    assert "WebLayer" not in layers["worker"] + layers["authorizer"]
    # what the worker lacks cannot be imported in its probe; what it carries can
    worker_absent = missing_modules({"engram", "docs", "model"})
    assert {"fastapi", "mcp", "starlette", "uvicorn", "yaml"} <= worker_absent
    assert not {"numpy", "pydantic", "onnxruntime", "pypdf", "docx", "engram"} & worker_absent


def test_every_family_has_its_function_endpoint_and_gateway_entry() -> None:
    resources = template()["Resources"]
    gateway_map = resources["GatewayFunction"]["Properties"]["Environment"]["Variables"]["ENGRAM_FAMILY_FUNCTIONS"]
    # {"memory": "MemoryFunctionAliaslive", ...}: each family's published alias, never $LATEST
    listed = json.loads(re.sub(r"\$\{(\w+)\}", r"\1", gateway_map))
    mcp_routes = {(r.path, r.function) for r in routes() if r.path.startswith("/mcp")}
    for family in families():
        function = family.capitalize() + "Function"
        assert function in resources, f"template.yaml has no {function}"
        assert (f"/mcp/{family}", function) in mcp_routes
        assert listed.get(family) == f"{function}Aliaslive"
        assert (ROOT / "functions" / family / "app.py").exists()
        assert f"build-{function}:" in (ROOT / "functions" / "Makefile").read_text()
    assert ("/mcp", "GatewayFunction") in mcp_routes


def test_every_function_is_published_with_snapstart_behind_its_alias() -> None:
    """SnapStart on published versions, an alias every caller goes through, a switch for regions without it,
    provisioned concurrency as an option that turns SnapStart off (the two do not combine)."""
    t = template()
    glob = t["Globals"]["Function"]
    assert glob["AutoPublishAlias"] == "live"
    assert glob["SnapStart"] == ["UseSnapStart", {"ApplyOn": "PublishedVersions"}, {"ApplyOn": "None"}]  # !If
    assert (
        t["Parameters"]["SnapStart"]["Default"] == "Enabled"
        and t["Parameters"]["ProvisionedConcurrency"]["Default"] == 0
    )
    assert t["Conditions"]["UseSnapStart"] == [["SnapStart", "Enabled"], ["HasProvisioned"]]  # Enabled, not provisioned
    functions = [r for r in t["Resources"].values() if r["Type"] == "AWS::Serverless::Function"]
    assert functions and all("AutoPublishAlias" not in f["Properties"] for f in functions)  # the global holds
    authorizer = t["Resources"]["HttpApi"]["Properties"]["Auth"]["Authorizers"]["KeyAuthorizer"]
    assert authorizer["FunctionArn"] == "AuthorizerFunctionAliaslive"  # !Ref


def test_functions_that_send_jobs_may_send_them() -> None:
    """The families whose requests send a queued job to SQS after their commit (`queue.started`) have
    sqs:SendMessage; on AWS a write would otherwise fail after it was committed."""
    resources = template()["Resources"]
    for function in ("ConversationFunction", "KnowledgeFunction", "RecordsFunction", "WorkspaceFunction"):
        policies = json.dumps(resources[function]["Properties"]["Policies"])
        assert "SQSSendMessagePolicy" in policies, function


def test_every_rest_path_is_routed_to_its_familys_function() -> None:
    routed = {(r.method, r.path): r.function for r in routes()}
    for op in select():
        for path in (op.path, *op.also):
            assert routed.get((op.method, "/api/v1/{context_id}" + path)) == op.family.capitalize() + "Function"


def test_cfn_lint_reports_nothing() -> None:
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    run = subprocess.run([str(cfn_lint), "template.yaml"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_function_handlers_are_wiring_only() -> None:
    for app in (ROOT / "functions").glob("*/app.py"):
        code = [line for line in app.read_text().splitlines() if line.strip() and not line.startswith(('"""', "#"))]
        imports = [line for line in code if line.startswith(("import", "from"))]
        assert imports and all(line.startswith("from engram.api.lambda_runtime import") for line in imports), app
        assert len(code) <= 4, app


@pytest.fixture(scope="module")
def sam_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sam build` (SAM CLI from PyPI when `sam` is not installed) with the layers' Makefiles."""
    import shutil

    tmp_path = tmp_path_factory.mktemp("sam")
    sam = (
        [shutil.which("sam")] if shutil.which("sam") else ["uv", "tool", "run", "--from", "aws-sam-cli==1.170.0", "sam"]
    )
    if os.environ.get("UV") and sam[0] == "uv":
        sam[0] = os.environ["UV"]
    build = tmp_path / "build"
    run = subprocess.run(
        [*sam, "build", "--build-dir", str(build), "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "SAM_CLI_TELEMETRY": "0"},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return build


def test_sam_build_makes_the_functions_and_layers_without_docker(sam_build: Path) -> None:
    """The wheels are Lambda's (CPython 3.13, arm64), the engram package lands in its layer, each
    package in the layer infra/layer_requirements.py gives it, minus what the Makefiles prune."""
    build = sam_build
    layer = build / "EngramLayer" / "python"
    assert (layer / "engram" / "api" / "lambda_runtime.py").exists()
    assert list(layer.glob("pydantic_core/*aarch64*.so")), "the layer must carry arm64 wheels"
    assert not (layer / "botocore").exists()  # the runtime has it
    assert list((build / "ModelLayer" / "python" / "onnxruntime" / "capi").glob("*cpython-313-aarch64*.so"))
    assert (build / "WebLayer" / "python" / "mcp").is_dir() and not (layer / "mcp").exists()
    assert (build / "DocsLayer" / "python" / "docx").is_dir() and not (layer / "lxml").exists()
    assert not (layer / "yaml").exists() and not (layer / "numpy" / "f2py").exists()
    for fn in ("Gateway", "Memory", "Knowledge", "Identity", "Authorizer", "Worker"):
        assert (build / f"{fn}Function" / "app.py").exists()
    assert not (build / "DocsLayer" / "python" / "lxml" / "html").exists()
    assert not (layer / "aws_lambda_powertools" / "event_handler").exists()
    # libraries as CPython 3.13 bytecode only (when the machine has a 3.13 to compile with), engram with sources
    main = layer / "pydantic" / "main"
    assert main.with_suffix(".pyc").exists() != main.with_suffix(".py").exists()
    if main.with_suffix(".pyc").exists():
        assert main.with_suffix(".pyc").read_bytes()[:4] == (3571).to_bytes(2, "little") + b"\r\n"  # 3.13
        assert list((layer / "engram" / "__pycache__").glob("*.cpython-313.pyc"))


def test_every_function_imports_with_nothing_but_its_built_layers(sam_build: Path) -> None:
    """On Lambda a function has its layers and the runtime's boto3, nothing else: each handler module is
    imported in a fresh interpreter where a locked dependency's module imports only if the function's
    built layers have it (so nothing a Makefile prunes, nor another function's layer, is reached)."""
    for function in function_layers():
        timings = import_function(function, sam_build)
        assert timings["total"] > 0, function
