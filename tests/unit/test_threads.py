"""#54: the local server's process runs numpy's BLAS on one thread (its pool spins on the cores the encoder's and the
requests' threads need). Checked in a fresh interpreter: the limit is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_building_the_local_engine_puts_blas_on_one_thread(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before and max(before) > 1  # numpy's BLAS starts with a thread a core here (the test needs two CPUs)
    assert after == [1] * len(before)
