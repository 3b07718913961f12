"""#54: the local engine's process runs numpy's BLAS on one thread (its pool spins on the cores the encoder's and the
requests' threads need). Checked in a fresh interpreter: the limit is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, sys
from pathlib import Path
from threadpoolctl import threadpool_info
import numpy
before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
from engram.settings import Settings
from engram.wiring import build_local
build_local(Settings(data_dir=Path(sys.argv[1]), embedder="none", queue_worker=False))
after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps([before, after]))
"""


IDLE_AFTER_A_PRODUCT = """
import resource, sys, time
from pathlib import Path
import numpy as np
if sys.argv[1] != "-":
    from engram.settings import Settings
    from engram.wiring import build_local
    build_local(Settings(data_dir=Path(sys.argv[1]), embedder="none", queue_worker=False))
m, q = np.ones((20000, 384), np.float32), np.ones(384, np.float32)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
time.sleep(1.0)  # past any spin of the pool's start (2^30 cycles): only what a product leaves is measured
spent = []
for _ in range(5):
    m @ q  # large enough for OpenBLAS to share it between its threads
    before = cpu()
    time.sleep(0.06)
    spent.append(cpu() - before)
print(min(spent) * 1000)
"""


def test_building_the_local_engine_puts_blas_on_one_thread(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before and max(before) > 1  # numpy's BLAS starts with a thread a core here (the test needs two CPUs)
    assert after == [1] * len(before)


@pytest.mark.parametrize("engine", [True, False])
def test_no_core_spins_after_a_product_once_the_engine_is_built(tmp_path: Path, engine: bool) -> None:
    """With OpenBLAS told to keep its helpers spinning (2^30 cycles), a product leaves a core burning through 60 ms of
    sleep — unless the local engine was built: then no helper thread is left to spin."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | {"OPENBLAS_THREAD_TIMEOUT": "30"}
    where = str(tmp_path) if engine else "-"
    done = subprocess.run([sys.executable, "-c", IDLE_AFTER_A_PRODUCT, where], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    idle_cpu_ms = float(done.stdout.split()[-1])
    assert (idle_cpu_ms > 10) != engine, idle_cpu_ms  # of 60 ms asleep: ~nothing, or most of it (a core free)
