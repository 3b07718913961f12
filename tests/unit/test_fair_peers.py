"""engram.trust.peers: with `engram serve --workers`, the fair share is of the machine — two shares over one table in
shared memory stand for two workers (#54)."""

from __future__ import annotations

import anyio
import pytest

from engram.trust import peers
from engram.trust.fair import FairShare

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def workers(n: int = 2, slots: int = 4) -> tuple[object, list[FairShare]]:
    table = peers.table(n)
    return table, [FairShare(slots, peers.Peers(table, i)) for i in range(n)]


async def call(share: FairShare, key: str, gate: anyio.Event, ran: list[str], name: str) -> None:
    async with share.turn(key):
        ran.append(name)
        await gate.wait()


async def test_a_context_beside_another_on_one_worker_runs_its_share_of_the_machine_on_the_other() -> None:
    """The quiet context runs on worker a; the noisy one's calls on worker b — where no other context has calls —
    keep to one (4 slots / (2 x 2 contexts)) while a slot of b stays free; as its call on a worker ends, the next
    waiting one runs, whether the call ended on b (at once) or on a (b looks again within POLL)."""
    _, (a, b) = workers()
    quiet, gates = anyio.Event(), [anyio.Event() for _ in range(4)]
    ran: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, a, "quiet", quiet, ran, "q")
        await anyio.sleep(0.01)
        tg.start_soon(call, a, "noisy", gates[0], ran, "n0")  # noisy's first call anywhere: at once, on a
        await anyio.sleep(0.01)
        for i in (1, 2, 3):
            tg.start_soon(call, b, "noisy", gates[i], ran, f"n{i}")
        await anyio.sleep(0.02)
        assert ran == ["q", "n0"]  # b has three free slots, and noisy runs its share on a
        assert b.running == 0 and len(b.waiting["noisy"]) == 3
        gates[0].set()  # noisy's call on a ends: b hears of it by looking again
        with anyio.fail_after(2):
            while len(ran) < 3:
                await anyio.sleep(0.005)
        assert ran[2] in ("n1", "n2", "n3") and b.running == 1 and len(b.waiting["noisy"]) == 2
        gates[int(ran[2][1])].set()  # that one ends on b: the next runs at once
        await anyio.sleep(0.02)
        assert len(ran) == 4 and b.running == 1
        quiet.set()
        for g in gates:
            g.set()
    assert a.running == b.running == 0 and not a.waiting and not b.waiting


async def test_alone_on_the_machine_a_context_uses_every_slot_of_each_worker() -> None:
    _, (a, b) = workers(slots=2)
    gate = anyio.Event()
    ran: list[str] = []
    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(call, a, "only", gate, ran, f"a{i}")
            tg.start_soon(call, b, "only", gate, ran, f"b{i}")
        await anyio.sleep(0.02)
        assert a.running == b.running == 2 and len(ran) == 4  # each worker's two slots: its third call waits
        gate.set()
    assert len(ran) == 6


async def test_a_workers_row_counts_its_calls_and_is_empty_when_they_end() -> None:
    table, (a, b) = workers()
    gate = anyio.Event()
    ran: list[str] = []
    assert b.peers is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, a, "x", gate, ran, "x0")
        tg.start_soon(call, a, "x", gate, ran, "x1")
        await anyio.sleep(0.01)
        assert b.peers.running("x") == 2 and b.peers.busy("x") and not b.peers.busy("y")
        assert b.peers.sharing(anyio.current_time(), 0.1) == {peers.bucket("x")}
        gate.set()
    assert b.peers.running("x") == 0 and not b.peers.busy("x")
    assert b.peers.sharing(anyio.current_time() + 1.0, 0.1) == set()  # its last call ended over `recent` ago
    peers.clear(table, 0)


async def test_a_worker_started_again_finds_its_row_empty() -> None:
    """The supervisor clears a row before a worker takes it: counts left by one killed mid-call hold no share."""
    table, (a, b) = workers()
    assert a.peers is not None and b.peers is not None
    a.peers.add("x", peers.RUNNING, 3)  # as a worker killed with three calls running leaves it
    a.peers.add("x", peers.WAITING, 2)
    assert b.peers.running("x") == 3
    peers.clear(table, 0)
    assert b.peers.running("x") == 0 and not b.peers.busy("x")


def test_a_context_falls_in_the_same_bucket_in_every_process() -> None:
    """A bucket is the context's CRC-32, not the interpreter's hash (which differs between processes)."""
    import os
    import subprocess
    import sys

    here = peers.bucket("tenant-1/ctx-é")
    there = subprocess.run(
        [sys.executable, "-c", "from engram.trust.peers import bucket; print(bucket('tenant-1/ctx-é'))"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "123"},
    )  # fmt: skip
    assert int(there.stdout) == here and 0 <= here < peers.BUCKETS


def test_services_built_in_a_worker_share_its_row_of_the_table(tmp_path: object) -> None:
    """`engram serve --workers`: a worker joins the table before it builds its services (engram.cli.workers), so the
    server's fair share reads the others' rows and writes its own."""
    from pathlib import Path

    from engram.kernel import load
    from engram.settings import Settings
    from engram.wiring import build_local

    table = peers.table(2)
    other = peers.Peers(table, 0)
    peers.join(table, 1)
    try:
        engram = build_local(Settings(data_dir=Path(str(tmp_path)), embedder="none", queue_worker=False))
        assert load.alone()
        other.add("elsewhere", peers.RUNNING, 1)  # the other worker runs a call: this one's encoder keeps to a thread
        assert not load.alone()
        other.add("elsewhere", peers.RUNNING, -1)
        assert load.alone()
    finally:
        peers.leave()
    assert load.alone() and peers.joined() is None
    assert engram.share.peers is not None
    engram.share._take("ctx")  # a call starts in this worker
    assert other.running("ctx") == 1
    engram.share._give("ctx")  # and ends
    assert other.running("ctx") == 0
    assert (
        build_local(Settings(data_dir=Path(str(tmp_path)) / "b", embedder="none", queue_worker=False)).share.peers
        is None
    )
