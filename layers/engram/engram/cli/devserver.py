"""`engram serve` as a child process on a free loopback port: for end-to-end tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cli(*args: str, data_dir: Path | str) -> str:
    """Run an `engram` command against a data dir; returns its standard output."""
    env = dict(os.environ, ENGRAM_DATA_DIR=str(data_dir))
    done = subprocess.run([sys.executable, "-m", "engram.cli", *args], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"engram {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def start(data_dir: Path | str, timeout: float = 60, workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    """Start `engram serve` (with `workers` processes) and wait for /healthz: the process and its base URL (the
    caller stops it)."""
    port = free_port()
    env = dict(os.environ, ENGRAM_DATA_DIR=str(data_dir))
    cmd = [sys.executable, "-m", "engram.cli", "serve", "--port", str(port), "--log-level", "warning"]
    cmd += ["--workers", str(workers)] if workers > 1 else []
    # Output goes to a file, not a pipe: nobody reads a pipe while the server runs, and a server that logs
    # (audit records of denials, say) would block on a full pipe and stop answering.
    log = tempfile.NamedTemporaryFile(prefix="engram-serve-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/healthz").status_code == 200:
                return proc, url
        if time.monotonic() > deadline or proc.poll() is not None:
            stop(proc)
            raise RuntimeError(f"engram serve did not start: {Path(log.name).read_text(errors='replace')[-4000:]}")
        time.sleep(0.1)


@contextlib.contextmanager
def serve(data_dir: Path | str, timeout: float = 60, workers: int = 1) -> Iterator[str]:
    """Start `engram serve`, wait for /healthz, yield its base URL, stop it."""
    proc, url = start(data_dir, timeout, workers)
    try:
        yield url
    finally:
        stop(proc)


@contextlib.contextmanager
def in_thread(app: Any, port: int | None = None, timeout: float = 30) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a loopback port, in a thread of this process (tests, benches): its
    base URL while it runs."""
    import threading

    import uvicorn

    from engram.cli.process import http_options

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **http_options()))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + timeout
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
