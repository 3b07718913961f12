"""A local AWS API emulator for the tests: moto in server mode on a loopback port, once per session.

Point AWS_ENDPOINT_URL at LocalStack (or anything that speaks the APIs) to run the same tests there;
then no moto process is started.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from engram.devserver import free_port


@contextlib.contextmanager
def aws_endpoint() -> Iterator[str]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    given = os.environ.get("AWS_ENDPOINT_URL")
    if given:
        yield given
        return
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
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
        proc.terminate()
        proc.wait(10)
