"""moto in server mode on a loopback port, once per session: the tests' DynamoDB (#51: every other AWS service
the tests use is LocalStack's, `tests.localstack`; DynamoDB stays here because LocalStack serves it only through
DynamoDB Local, which this project may not take), and the whole AWS API for benches that want one process.

The server answers one request at a time. moto's threaded server checks a transaction's conditions
and applies its writes without a lock, so concurrent conditional writes could both pass, which real
DynamoDB never allows; serialising requests keeps the emulator faithful to the guarantee the
RecordStore contract tests (no lost update under concurrent writers).

`MOTO_URL` names a moto server already running: then none is started here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from engram.cli.devserver import free_port, stop

SERVER = (
    "import sys; from werkzeug.serving import run_simple; "
    "from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app; "
    "run_simple('127.0.0.1', int(sys.argv[1]), DomainDispatcherApplication(create_backend_app), threaded=False)"
)


@contextlib.contextmanager
def aws_endpoint() -> Iterator[str]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    given = os.environ.get("MOTO_URL")
    if given:
        yield given
        return
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                httpx.get(url + "/moto-api/")
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("moto server did not start")
            time.sleep(0.1)
        yield url
    finally:
        stop(proc)
