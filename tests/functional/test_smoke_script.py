"""infra/smoke.py (the deploy workflow's check) against a live local server, as CI runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.aws_lambda.apigw import ROOT
from tests.conftest import Live


def run_smoke(url: str, key: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ENGRAM_SMOKE_KEY=key)
    return subprocess.run([sys.executable, "infra/smoke.py", url], cwd=ROOT, env=env, capture_output=True, text=True)


def test_smoke_passes_against_a_working_server(live: Live) -> None:
    run = run_smoke(live.url + "/mcp", live.keys.agent)
    assert run.returncode == 0, run.stderr
    assert "ok memory_recall: found the marker" in run.stdout


def test_smoke_fails_with_a_bad_key(live: Live) -> None:
    run = run_smoke(live.url + "/mcp", live.keys.revoked)
    assert run.returncode == 1 and "FAILED" in run.stderr
