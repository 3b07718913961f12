"""engram.trust.fair: a context's burst queues behind itself; the next free slot goes to the context running fewest."""

from __future__ import annotations

import anyio
import pytest

from engram.trust.fair import FairShare

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_the_next_slot_goes_to_the_context_running_fewest() -> None:
    share = FairShare(1)
    order: list[str] = []
    release = anyio.Event()

    async def call(key: str, name: str, hold: anyio.Event | None = None) -> None:
        async with share.turn(key):
            order.append(name)
            if hold is not None:
                await hold.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "noisy", "n0", release)
        await anyio.sleep(0.01)
        for i in range(1, 4):
            tg.start_soon(call, "noisy", f"n{i}")
        await anyio.sleep(0.01)
        tg.start_soon(call, "quiet", "q0")  # arrives after three of noisy's calls: none of its own runs or waits
        await anyio.sleep(0.01)
        assert order == ["n0", "q0"] and share.running == 1  # it ran at once, past the full house
        release.set()
    assert order == ["n0", "q0", "n1", "n2", "n3"]
    assert share.running == 0 and not share.active and not share.waiting


async def test_waiting_calls_alternate_and_first_calls_pass_up_to_twice_the_slots() -> None:
    share = FairShare(1)
    order: list[str] = []
    gates = {k: anyio.Event() for k in ("a", "b")}

    async def call(key: str, name: str, hold: bool = False) -> None:
        async with share.turn(key):
            order.append(name)
            if hold:
                await gates[key].wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a", "a0", True)
        await anyio.sleep(0.01)
        for name in ("a1", "a2"):
            tg.start_soon(call, "a", name)
        tg.start_soon(call, "b", "b0", True)  # b's first call: at once (two running: twice the one slot)
        await anyio.sleep(0.01)
        tg.start_soon(call, "c", "c0")  # c's first call: the house is full twice over, it waits
        tg.start_soon(call, "b", "b1")  # b runs a call: it waits
        await anyio.sleep(0.01)
        assert order == ["a0", "b0"] and share.running == 2
        gates["a"].set()
        await anyio.sleep(0.01)
        assert order == ["a0", "b0"] and share.running == 1  # a0 ended, but b0 still holds the one slot
        gates["b"].set()
    # then one at a time, the context running fewest first, ties to the one served longest ago
    assert order == ["a0", "b0", "c0", "a1", "b1", "a2"]
    assert share.running == 0 and not share.active and not share.waiting


async def test_idle_calls_do_not_wait_and_slots_bound_the_running() -> None:
    share = FairShare(3)
    peak = [0]
    gate = anyio.Event()

    async def call(key: str) -> None:
        async with share.turn(key):
            peak[0] = max(peak[0], share.running)
            await gate.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(8):  # one context alone may use every slot
            tg.start_soon(call, "c0")
        await anyio.sleep(0.01)
        assert share.running == 3 and sum(len(q) for q in share.waiting.values()) == 5
        gate.set()
    assert peak[0] == 3 and share.running == 0 and not share.waiting


async def test_beside_another_context_a_context_runs_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """#54: a noisy context holding every slot keeps one (4 slots / (2 x 2 contexts)) once a quiet one calls, as its
    calls end; the freed slots wait rather than go to it. Once the quiet one has had no call for RECENT, it may use
    every slot again."""
    import engram.trust.fair as fair

    monkeypatch.setattr(fair, "RECENT", 0.05)
    share = FairShare(4)
    gates = [anyio.Event() for _ in range(8)]
    quiet_gate = anyio.Event()

    async def noisy(i: int) -> None:
        async with share.turn("noisy"):
            await gates[i].wait()

    async def quiet() -> None:
        async with share.turn("quiet"):
            await quiet_gate.wait()

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(noisy, i)
        await anyio.sleep(0.01)
        assert share.active == {"noisy": 4} and len(share.waiting["noisy"]) == 4  # alone: every slot
        tg.start_soon(quiet)  # its first call: at once, past the full house
        await anyio.sleep(0.01)
        assert share.active == {"noisy": 4, "quiet": 1}
        for i in range(3):  # three of noisy's calls end: none of its waiting ones takes their slots
            gates[i].set()
        await anyio.sleep(0.01)
        assert share.active == {"noisy": 1, "quiet": 1} and len(share.waiting["noisy"]) == 4
        gates[3].set()  # its last running call ends: it is under its share, one waiting call runs
        await anyio.sleep(0.01)
        assert share.active == {"noisy": 1, "quiet": 1} and len(share.waiting["noisy"]) == 3
        quiet_gate.set()  # the quiet call ends: for RECENT noisy still runs its share
        await anyio.sleep(0.01)
        assert share.active == {"noisy": 1}
        await anyio.sleep(0.06)
        gates[4].set()  # the next end after RECENT: every slot is noisy's again
        await anyio.sleep(0.01)
        assert share.active == {"noisy": 3} and not share.waiting
        for g in gates:
            g.set()
    assert share.running == 0 and not share.active and not share.waiting


async def test_a_cancelled_waiter_gives_back_what_it_held() -> None:
    share = FairShare(1)
    gate = anyio.Event()

    async def hold() -> None:
        async with share.turn("a"):
            await gate.wait()

    async def wait_then_run(ran: list[str]) -> None:
        async with share.turn("a"):  # its context runs a call: it waits
            ran.append("b")

    ran: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await anyio.sleep(0.01)
        with anyio.move_on_after(0.02):  # cancelled while it waits
            await wait_then_run(ran)
        assert not share.waiting and ran == []
        gate.set()
    assert share.running == 0 and not share.active
    await wait_then_run(ran)  # the slot is free again
    assert ran == ["b"]


async def test_the_process_counts_its_running_calls_for_the_encoder() -> None:
    """engram.kernel.load: a call alone, then one beside another, then none (#54)."""
    from engram.kernel import load

    share = FairShare(2)
    seen: list[bool] = []
    both = anyio.Event()

    async def call(hold: anyio.Event | None) -> None:
        async with share.turn("c"):
            seen.append(load.alone())
            if hold is not None:
                await hold.wait()
                seen.append(load.alone())

    assert load.alone()
    async with anyio.create_task_group() as tg:
        tg.start_soon(call, both)
        await anyio.sleep(0.01)
        tg.start_soon(call, None)  # runs while the first holds its slot
        await anyio.sleep(0.01)
        both.set()
    assert seen == [True, False, True]
    assert load.alone() and load._running == [0]


async def test_a_read_of_a_context_with_calls_waiting_gives_way_to_a_lighter_contexts_call() -> None:
    """#54: a quiet context's call shares the interpreter with the noisy context's running read; that read, its
    context having calls waiting, waits at its points (`way`) until the quiet call ends, for at most WAY over the
    whole read; the quiet context's own reads, and any once it is done, go on at once."""
    import time
    from collections.abc import Callable

    import engram.trust.fair as fair

    share = FairShare(4)
    noisy_gate, quiet_gate = anyio.Event(), anyio.Event()

    async def noisy() -> None:
        async with share.turn("noisy"):
            await noisy_gate.wait()

    async def quiet() -> None:
        async with share.turn("quiet"):
            await quiet_gate.wait()

    def timed(give: Callable[[], None]) -> float:
        t = time.perf_counter()
        give()  # (on a worker thread, as a call's work runs)
        return time.perf_counter() - t

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(noisy)
        await anyio.sleep(0.01)
        assert await anyio.to_thread.run_sync(timed, share.way("noisy")) < 0.005  # alone: nobody to give way to
        tg.start_soon(quiet)
        await anyio.sleep(0.01)
        assert await anyio.to_thread.run_sync(timed, share.way("quiet")) < 0.005  # it has no call waiting
        read = share.way("noisy")
        assert fair.WAY * 0.9 <= await anyio.to_thread.run_sync(timed, read) < fair.WAY * 3  # at most WAY ...
        assert await anyio.to_thread.run_sync(timed, read) < 0.005  # ... over the whole read

        async def end_quiet_soon() -> None:
            await anyio.sleep(0.02)
            quiet_gate.set()

        tg.start_soon(end_quiet_soon)
        waited = await anyio.to_thread.run_sync(timed, share.way("noisy"))
        assert 0.015 <= waited < fair.WAY * 0.9  # until the quiet call ended
        assert await anyio.to_thread.run_sync(timed, share.way("noisy")) < 0.005  # nobody lighter runs now
        noisy_gate.set()
    assert share.clear.is_set() and share.running == 0 and not share.waiting
