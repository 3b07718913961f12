"""SnapStart, as Lambda runs it, one function at a time in a fresh interpreter over moto and the OpenSearch
node: import the function (init), run its before-snapshot hooks (publish), its after-restore hooks (a new
execution environment), then a request. The request must import nothing and make no client: whatever it
needs was imported before the snapshot, and the clients were made fresh after the restore (so the restore
path cannot silently grow). The authorizer imports no web framework, no MCP SDK and no X-Ray SDK."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from engram.api.auth import authorizer_context
from engram.settings import Settings
from engram.wiring import build_identity
from tests import stack
from tests.conftest import Aws

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]
ROOT = Path(__file__).resolve().parents[2]
# the function's packages as this process has them (the dev environment, or the built layers on 3.13), and
# the repository for the functions and tests
PYTHONPATH = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p)
PROBE = Path(__file__).with_name("snapstart_probe.py")
FUNCTIONS = ["gateway", "authorizer", "worker", "memory", "knowledge", "conversation", "entities", "context",
             "identity", "records", "workspace"]  # fmt: skip


@pytest.fixture(scope="module")
def environment(aws: Aws, opensearch: str) -> dict[str, Any]:
    name = f"engram-snap-{uuid.uuid4().hex[:6]}"
    env = {
        "AWS_ENDPOINT_URL": aws.localstack,
        "AWS_ENDPOINT_URL_DYNAMODB": aws.dynamodb,
        "ENGRAM_BACKEND": "aws",
        "ENGRAM_TABLE": name,
        "ENGRAM_BUCKET": name,
        "ENGRAM_OPENSEARCH_URL": opensearch,
        "ENGRAM_OPENSEARCH_SERVICE": "none",
        "ENGRAM_OPENSEARCH_INDEX": name,
        "ENGRAM_DNS_REBINDING_PROTECTION": "false",
        "ENGRAM_FAMILY_FUNCTIONS": "{}",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "Engram",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        stack.table(name)  # the template's resources (tests.stack)
        stack.bucket(aws.stack, name)
        env["ENGRAM_QUEUE_URL"] = stack.queue(aws.stack, name)
        mp.setenv("ENGRAM_QUEUE_URL", env["ENGRAM_QUEUE_URL"])
        identity = build_identity(Settings())
        key, principal = identity.create_key(["acme"], "agent", ["org/acme"])
    return {"env": env, "authorizer": {"key": key, "context": authorizer_context(principal)}}


def probe(name: str, environment: dict[str, Any]) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, str(PROBE), name, json.dumps(environment["authorizer"])],
        env={**os.environ, **environment["env"], "PYTHONPATH": PYTHONPATH},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_restored_function_answers_without_importing_or_making_clients(
    name: str, environment: dict[str, Any]
) -> None:
    out = probe(name, environment)
    assert out["new_modules"] == [], f"{name}'s first request after restore imported {out['new_modules']}"
    assert out["clients_made"] == 0, f"{name}'s first request after restore made {out['clients_made']} client(s)"
    assert out["credentials_in_snapshot"] == [], f"{name}'s snapshot would hold credentials"
    answer = out["answer"]
    if name == "authorizer":
        assert answer is True and out["api_calls"] == ["GetItem"]  # a key check is one DynamoDB GetItem
    elif name == "worker":
        assert answer == {"recovered": 0}
    else:
        assert answer["status"] == 200 and answer["error"] is None and not answer["is_error"], answer


def test_a_cold_calls_first_reads_are_one_request(environment: dict[str, Any]) -> None:
    """A restored function's first call reads its quotas and its audit chain's head in one BatchGetItem, then
    appends (#49: they were a BatchGetItem and a GetItem in flight at once, which an emulator answers in turn)."""
    probe("identity", environment)  # the context's chain has a head from here on
    calls = probe("identity", environment)["api_calls"]
    assert calls == ["BatchGetItem", "TransactWriteItems"], calls


def test_the_authorizer_is_lean(environment: dict[str, Any]) -> None:
    code = (
        "import sys, importlib.util, time; t = time.perf_counter();"
        f"s = importlib.util.spec_from_file_location('a', r'{ROOT / 'functions' / 'authorizer' / 'app.py'}');"
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m);"
        "print(sorted(x for x in ('fastapi', 'starlette', 'mcp', 'aws_xray_sdk', 'mangum', 'numpy', 'opensearchpy',"
        " 'jwt', 'cryptography.x509')"
        " if x in sys.modules))"
    )
    env = {**os.environ, **environment["env"], "PYTHONPATH": PYTHONPATH}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_the_authorizer_fetches_the_issuers_keys_before_the_snapshot_not_at_init() -> None:
    """At init it fetched every trusted issuer's keys (a scan and the JWKS requests: 0.5 s of a cold start
    without SnapStart); they belong in the snapshot, fetched by the before-snapshot hook."""
    from engram.api import snapstart
    from engram.api.lambda_runtime import authorizer_handler

    warmed: list[str] = []

    class Identity:
        def warm_tokens(self) -> None:
            warmed.append("keys")

    authorizer_handler(Identity())  # type: ignore[arg-type]
    assert warmed == []
    try:
        snapstart.before_snapshot("authorizer", None, None, warm=Identity().warm_tokens)
    finally:
        gc.unfreeze()  # what the hook froze for the snapshot: this process goes on
    assert warmed == ["keys"]
