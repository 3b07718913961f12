"""`engram serve --workers 2` (#54: the server uses every core): two processes on one port, each with a socket of its
own, meeting in one data folder.

- Many writers at once, spread over both workers: every acknowledged memory is recalled afterwards, whichever
  worker is asked; appends to one thread from both workers are numbered without a gap or a repeat.
- A worker killed with -9 mid-writes is replaced; nothing acknowledged is lost, and the server keeps answering.
- The supervisor stops its workers (SIGTERM), and workers whose supervisor was killed stop by themselves; a port
  already in use is refused.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from engram.cli.devserver import free_port, start, stop
from tests.e2e.served import CTX, api, keyed_folder

pytestmark = pytest.mark.e2e


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, str]:
    return keyed_folder(tmp_path)


def workers_of(pid: int) -> list[int]:
    """The supervisor's worker processes (multiprocessing's spawned children, not its resource tracker)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out if "spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie child of a killed supervisor is reaped by init; /proc still lists it for a moment
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def recalled(c: httpx.Client, acknowledged: dict[str, str]) -> dict[str, str]:
    """The acknowledged (turn id → its marker word) that a BM25 recall of the marker does not find."""
    missing = dict(acknowledged)
    for tid, word in list(missing.items()):
        r = c.post("/context", json={"query": f"valve {word}", "k": 5, "mode": "bm25"})
        assert r.status_code == 200, r.text
        if tid in {h["id"] for h in r.json()["results"]}:
            del missing[tid]
    return missing


def test_writers_over_two_workers_every_acknowledged_write_kept_and_seen_by_both(data: tuple[Path, str]) -> None:
    folder, key = data
    proc, url = start(folder, workers=2)
    try:
        workers = workers_of(proc.pid)
        assert len(workers) == 2
        before = {w: cpu_of(w) for w in workers}
        acknowledged: dict[str, str] = {}
        messages: list[str] = []
        lock = threading.Lock()

        def writer(w: int) -> None:
            with api(url, key) as c:  # a connection of its own: the kernel gives it to one worker or the other
                for n in range(6):
                    word = f"v{w}x{n}"
                    r = c.post("/facts", json={"content": f"Writer {w} replaced valve {word} at the pump station."})
                    assert r.status_code == 200, r.text
                    m = c.post("/threads/messages", json={"thread_id": "ops", "role": "user", "content": f"{w}.{n}"})
                    assert m.status_code == 200, m.text
                    with lock:
                        acknowledged[r.json()["turn_id"]] = word
                        messages.append(m.json()["message_id"])

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(acknowledged) == 72 and len(messages) == 72
        used = {w: cpu_of(w) - before[w] for w in workers}
        assert all(s > 0.05 for s in used.values()), used  # both workers answered some of the writers
        for _ in range(4):  # new connections, each to either worker: every write seen by whichever answers
            with api(url, key) as c:
                assert recalled(c, acknowledged) == {}
                r = c.get("/threads/messages", params={"thread_id": "ops", "limit": 1000})
                assert r.status_code == 200, r.text
                ids = [m["id"] for m in r.json()["messages"]]
                assert sorted(ids) == sorted(messages)
        from engram.adapters.local.sqlite_records import SqliteRecordStore

        numbers = sorted(
            i.data["n"] for i in SqliteRecordStore(folder / "records.db").query(CTX, "message", limit=1000).items
        )
        assert numbers == list(range(1, 73))  # appends from both processes: no gap, no repeat
    finally:
        stop(proc)
    assert all(gone(w) for w in workers)


def test_a_worker_killed_mid_writes_is_replaced_and_nothing_acknowledged_is_lost(data: tuple[Path, str]) -> None:
    folder, key = data
    proc, url = start(folder, workers=2)
    try:
        first = workers_of(proc.pid)
        acknowledged: dict[str, str] = {}
        lock, stop_sending = threading.Lock(), threading.Event()

        def writer(w: int) -> None:
            n = 0
            while not stop_sending.is_set():
                n += 1
                word = f"v{w}x{n}"
                try:  # a fresh connection a write: after the kill, new ones reach the live worker
                    with api(url, key) as c:
                        r = c.post("/facts", json={"content": f"Writer {w} replaced valve {word} at the pump station."})
                except httpx.TransportError:
                    continue  # its worker died mid-request: not acknowledged
                if r.status_code == 200:
                    with lock:
                        acknowledged[r.json()["turn_id"]] = word

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(acknowledged) < 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(first[0], signal.SIGKILL)
        at_kill = len(acknowledged)
        while len(acknowledged) < at_kill + 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop_sending.set()
        for t in threads:
            t.join(60)
        assert len(acknowledged) >= at_kill + 30  # the server kept answering writes after the kill
        while len(workers_of(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        now = workers_of(proc.pid)
        assert len(now) == 2 and first[0] not in now and first[1] in now  # the dead one replaced, the other kept
        with api(url, key) as c:
            missing = recalled(c, acknowledged)
            while missing and time.monotonic() < deadline:  # a write killed between commit and indexing: its job
                time.sleep(0.5)
                missing = recalled(c, missing)
            assert not missing, f"{len(missing)} acknowledged memories never reached the index"
        from engram.adapters.local.sqlite_records import SqliteRecordStore

        turns = SqliteRecordStore(folder / "records.db").query(CTX, "turn", limit=10_000).items
        contents = [t.data["content"] for t in turns]
        assert len(contents) == len(set(contents)) and set(acknowledged) <= {t.id for t in turns}
    finally:
        stop(proc)


def test_workers_stop_with_their_supervisor_even_when_it_is_killed(data: tuple[Path, str]) -> None:
    folder, key = data
    proc, url = start(folder, workers=2)
    workers = workers_of(proc.pid)
    assert len(workers) == 2
    with api(url, key) as c:
        assert c.post("/facts", json={"content": "The pump station opened in 1998."}).status_code == 200
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while not all(gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(gone(w) for w in workers)  # nothing holds the port for a server that is no longer there
    proc, url = start(folder, workers=2)  # the port's users gone, the folder serves again
    try:
        with api(url, key) as c:
            r = c.post("/context", json={"query": "when did the pump station open", "k": 5})
            assert "1998" in r.json()["context"]
    finally:
        stop(proc)


def test_a_port_already_in_use_is_refused(data: tuple[Path, str]) -> None:
    folder, _ = data
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        env = dict(os.environ, ENGRAM_DATA_DIR=str(folder))
        cmd = [sys.executable, "-m", "engram.cli", "serve", "--port", str(port), "--workers", "2"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


@pytest.mark.parametrize("workers", ["0", "65", "two"])
def test_a_number_of_workers_out_of_range_is_refused(data: tuple[Path, str], workers: str) -> None:
    folder, _ = data
    env = dict(os.environ, ENGRAM_DATA_DIR=str(folder))
    cmd = [sys.executable, "-m", "engram.cli", "serve", "--workers", workers]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "a number of processes from 1 to 64" in done.stderr
