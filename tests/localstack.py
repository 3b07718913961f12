"""LocalStack for the tests (#51), in host mode: no Docker, started by the tests themselves, stopped by its PID.

LocalStack 2026.3.0 is the last community release (the project was archived in March 2026; later images need an
account token), pinned in `infra/localstack/requirements.txt` with its dependencies' hashes and installed into an
environment of its own (`.localstack/venv`, CPython 3.13: it imports `warnings.deprecated`; it brings its own moto),
made once and kept until the lock changes. It serves S3, SQS, EventBridge, SNS, CloudWatch and its Logs, KMS, SSM,
Secrets Manager, IAM, STS and CloudFormation on one loopback port.

Not DynamoDB: LocalStack serves it only through DynamoDB Local, whose licence is the vendor's own terms and which
this project may not take (the registry's note on `software.amazon.dynamodb:DynamoDBLocal`: not to use). Records
stay on moto's DynamoDB, in tables made from the template's own definition (`tests.stack`).

Settings found necessary on these machines: `OVERRIDE_IN_DOCKER=0` (the machine looks like a container),
`GATEWAY_SERVER=hypercorn` on `127.0.0.1` (the default server needs `service_identity`, and nothing should listen
beyond loopback), `DNS_ADDRESS=0` (no DNS server of its own), `KINESIS_LATENCY=0`.

`LOCALSTACK_URL` names a LocalStack already running (the GitHub workflow's container, a developer's own): then
nothing is installed or started here. Without CPython 3.13, or when LocalStack does not start, the fixture fails
and says why: the AWS suites never run silently against less."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from engram.cli.devserver import free_port, stop

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "infra" / "localstack" / "requirements.txt"
HOME = ROOT / ".localstack"
SERVICES = "s3,sqs,events,sns,cloudwatch,logs,kms,ssm,secretsmanager,iam,sts,cloudformation"
STARTED: dict[str, float] = {}  # seconds: installing (when it had to), starting (bench/RESULTS.md, #51)


def python313() -> str | None:
    """A CPython 3.13 on this machine: on PATH, or pyenv's."""
    found = [
        shutil.which("python3.13"),
        *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"), reverse=True),
    ]
    for p in found:
        if p and subprocess.run([str(p), "-c", "pass"], capture_output=True).returncode == 0:
            return str(p)
    return None


def install() -> Path:
    """LocalStack's environment, made or brought up to the lock; its Python."""
    python = HOME / "venv" / "bin" / "python"
    stamp = HOME / "venv" / ".lock-sha256"
    wanted = hashlib.sha256(LOCK.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    base = python313()
    if base is None:
        raise RuntimeError("LocalStack needs CPython 3.13 (python3.13 on PATH, or pyenv's): none found on this machine")
    uv = os.environ.get("UV") or shutil.which("uv") or "uv"
    started = time.perf_counter()
    HOME.mkdir(exist_ok=True)
    (HOME / ".gitignore").write_text("*\n")
    subprocess.run([uv, "venv", "--quiet", "--allow-existing", "-p", base, str(HOME / "venv")], check=True)
    subprocess.run([uv, "pip", "sync", "--quiet", "--require-hashes", "-p", str(python), str(LOCK)], check=True)
    stamp.write_text(wanted)
    STARTED["install_s"] = round(time.perf_counter() - started, 1)
    return python


@contextlib.contextmanager
def localstack(timeout: float = 120) -> Iterator[str]:
    """LocalStack's URL while it runs (or `LOCALSTACK_URL`'s)."""
    given = os.environ.get("LOCALSTACK_URL")
    if given:
        yield given
        return
    python = install()
    port = free_port()
    root = Path(tempfile.mkdtemp(prefix="engram-localstack-"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_ENDPOINT_URL", "ENGRAM_"))},
        "OVERRIDE_IN_DOCKER": "0",
        "GATEWAY_SERVER": "hypercorn",
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "LOCALSTACK_HOST": f"127.0.0.1:{port}",
        "DNS_ADDRESS": "0",
        "KINESIS_LATENCY": "0",
        "SERVICES": SERVICES,
        "EAGER_SERVICE_LOADING": "0",
        "FILESYSTEM_ROOT": str(root),
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "DISABLE_EVENTS": "1",  # no analytics to send anywhere
        "LOCALSTACK_CLI": "0",
    }
    log = root / "localstack.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen([str(python), "-m", "localstack.runtime.main"], env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.TransportError, ValueError):
                health = httpx.get(url + "/_localstack/health", timeout=2).json()
                if health.get("services", {}).get("s3") in ("available", "running"):
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"LocalStack did not start: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        STARTED["start_s"] = round(time.perf_counter() - started, 2)
        yield url
    finally:
        stop(proc)
        shutil.rmtree(root, ignore_errors=True)
