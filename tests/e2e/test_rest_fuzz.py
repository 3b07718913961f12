"""Schemathesis against the OpenAPI document of a served process: every REST operation, generated and
edge-case arguments (bounded and seeded: the same cases every run in `make test`; `make fuzz` sends more, from a
new seed), with a management key in its context.
No answer may be a server error, every answer's status and body (an error's too) are as the spec declares them,
and the server logs no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engram.cli.devserver import cli, serve

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("ENGRAM_REST_FUZZ_EXAMPLES", "5"))  # an operation's cases a phase


def test_no_server_error_on_any_rest_operation(tmp_path: Path) -> None:
    out = cli(
        "keys", "create", "--context", "acme", "--principal", "management", "--grant", "org/acme", data_dir=tmp_path
    )
    key = out.strip().splitlines()[-1]
    env = dict(os.environ, ENGRAM_FUZZ_CONTEXT="acme")  # tests/schemathesis.toml: every request in this context
    with serve(tmp_path) as url:
        run = subprocess.run(
            [
                str(Path(sys.executable).parent / "schemathesis"),
                "--config-file",
                str(ROOT / "tests" / "schemathesis.toml"),
                "run",
                f"{url}/openapi.json",
                "--checks",  # no server error; every status and every body (errors too) as the spec declares
                "not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                os.environ.get("ENGRAM_FUZZ_SEED", "1"),
                "--header",
                f"Authorization: Bearer {key}",
                "--include-path-regex",
                "/api/v1/",
                "--no-color",
            ],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=max(600, 120 * EXAMPLES),
        )
    summary = run.stdout[-6000:]
    assert run.returncode == 0, summary
    tested = re.search(r"Tested: (\d+)", summary)
    assert tested and int(tested.group(1)) >= 30, summary  # every REST operation was reached
    generated = re.search(r"(\d+) generated, (\d+) passed", summary)
    assert generated and generated.group(1) == generated.group(2) and int(generated.group(1)) > 1000, summary
    print(generated.group(0))
