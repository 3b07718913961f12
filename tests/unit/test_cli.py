"""`engram keys` and `engram scopes` commands (in process, on a temporary data dir)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram.cli.main import main
from engram.settings import Settings
from engram.wiring import build_local


def test_keys_create_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--data-dir", str(tmp_path)]
    assert main(["keys", "create", *d, "--context", "acme", "--principal", "agent", "--grant", "org/acme"]) == 0
    secret = capsys.readouterr().out.strip().splitlines()[-1]
    assert secret.startswith("sk-")
    assert main(["keys", "list", *d]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (
        len(listed) == 1
        and listed[0]["principal"] == "agent"
        and "role" not in listed[0]
        and secret not in json.dumps(listed)
    )
    engram = build_local(Settings(data_dir=tmp_path, embedder="none"))
    assert engram.identity.authenticate(secret).role == "agent"
    assert main(["keys", "revoke", *d, listed[0]["key_id"]]) == 0
    from engram.kernel.errors import Unauthenticated

    with pytest.raises(Unauthenticated):
        engram.identity.authenticate(secret)
    assert main(["keys", "revoke", *d, "key_nope"]) == 2
    assert "no key" in capsys.readouterr().err


def test_scopes_create_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = ["--data-dir", str(tmp_path)]
    assert main(["scopes", "create", *d, "--context", "acme", "org/acme/user/alice", "org/acme/team/eng"]) == 0
    capsys.readouterr()
    assert main(["scopes", "list", *d, "--context", "acme"]) == 0
    assert capsys.readouterr().out.split() == ["org/acme/team/eng", "org/acme/user/alice"]
    assert main(["scopes", "create", *d, "--context", "acme", "bad path"]) == 2
    assert main(["keys", "create", *d, "--context", "Bad Ctx", "--principal", "agent", "--grant", "org/a"]) == 2


def test_a_server_settles_what_it_loaded_to_start() -> None:
    """`engram serve`/`stdio` move what starting loaded out of the collector's generations (`process.settle`), so a
    full collection walks only what came after."""
    import gc

    from engram.cli.process import settle

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        settle()
        assert gc.get_freeze_count() > 1000  # modules, functions, schemas
    finally:
        gc.unfreeze()


IDLE_AFTER_A_PRODUCT = """
import resource, sys, time
from engram.cli.main import main
try:
    main(["--help"])
except SystemExit:
    pass
import numpy as np
m, q = np.ones((20000, 384), np.float32), np.ones(384, np.float32)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
spent = []
for _ in range(3):
    m @ q  # large enough for OpenBLAS to share it between its threads
    before = cpu()
    time.sleep(0.06)
    spent.append(cpu() - before)
print(min(spent) * 1000)
"""


@pytest.mark.parametrize(("given", "spins"), [(None, False), ("30", True)])
def test_numpys_blas_threads_sleep_soon_after_a_product(given: str | None, spins: bool) -> None:
    """`engram` (serve, stdio, every command) starts OpenBLAS with a short thread timeout: after a product it
    shared out, its helper threads sleep after a few milliseconds instead of spinning a core for ~0.1 s; a value
    the environment sets is kept (30: they spin, the CPU time shows it)."""
    import os
    import subprocess
    import sys

    from engram.adapters.local.onnx_embedder import usable_cpus

    assert usable_cpus() >= 2, "OpenBLAS shares a product only with two CPUs or more"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_NUM_THREADS")}
    if given is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = given
    done = subprocess.run([sys.executable, "-c", IDLE_AFTER_A_PRODUCT], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    idle_cpu_ms = float(done.stdout.split()[-1])
    assert (idle_cpu_ms > 30) == spins, idle_cpu_ms  # of 60 ms asleep: ~8 ms (2^24 cycles) or all of it
