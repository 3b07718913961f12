"""A real single-node OpenSearch 2.19.1 with the k-NN plugin, built from Maven Central artifacts by
`infra/opensearch/pom.xml` and started once per test session (about 20 s). Set OPENSEARCH_URL to use a
node that is already running instead."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from engram.cli.devserver import free_port, stop

INFRA = Path(__file__).resolve().parents[1] / "infra" / "opensearch"


def build() -> None:
    """`mvn package` when the launcher or its pom changed since the last build."""
    marker = INFRA / "target" / "classes" / "engram" / "EngramNode.class"
    sources = [INFRA / "pom.xml", INFRA / "src" / "main" / "java" / "engram" / "EngramNode.java"]
    if marker.exists() and all(marker.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return
    subprocess.run(["mvn", "-q", "-B", "-f", str(INFRA / "pom.xml"), "package"], check=True)


@contextlib.contextmanager
def opensearch_node(timeout: float = 120) -> Iterator[str]:
    given = os.environ.get("OPENSEARCH_URL")
    if given:
        yield given
        return
    build()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="engram-os-") as home:
        log = open(Path(home) / "node.log", "wb")  # noqa: SIM115 - closed below, after the process
        cmd = [
            "java",
            "-Xms256m",
            "-Xmx768m",
            "-cp",
            f"{INFRA}/target/classes:{INFRA}/target/lib/*",
            "engram.EngramNode",
            home,
            str(port),
        ]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(httpx.TransportError):
                    health = httpx.get(url + "/_cluster/health", params={"wait_for_status": "yellow", "timeout": "1s"})
                    if health.status_code == 200:
                        break
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("OpenSearch did not start:\n" + (Path(home) / "node.log").read_text()[-3000:])
                time.sleep(0.5)
            yield url
        finally:
            stop(proc, grace=30)
            log.close()
