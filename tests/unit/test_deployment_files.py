"""template.yaml, the layers and the functions stay in step with the code: every family has a function,
every REST path a route, every locked dependency its layer; cfn-lint finds nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from engram.operations.registry import families, select
from tests.aws_lambda.apigw import ROOT, routes, template


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


def test_every_family_has_its_function_endpoint_and_gateway_entry() -> None:
    resources = template()["Resources"]
    gateway_map = resources["GatewayFunction"]["Properties"]["Environment"]["Variables"]["ENGRAM_FAMILY_FUNCTIONS"]
    listed = json.loads(re.sub(r"\$\{(\w+)\}", r"\1", gateway_map))  # {"memory": "MemoryFunction", ...}
    mcp_routes = {(r.path, r.function) for r in routes() if r.path.startswith("/mcp")}
    for family in families():
        function = family.capitalize() + "Function"
        assert function in resources, f"template.yaml has no {function}"
        assert (f"/mcp/{family}", function) in mcp_routes
        assert listed.get(family) == function
        assert (ROOT / "functions" / family / "app.py").exists()
        assert f"build-{function}:" in (ROOT / "functions" / "Makefile").read_text()
    assert ("/mcp", "GatewayFunction") in mcp_routes


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
