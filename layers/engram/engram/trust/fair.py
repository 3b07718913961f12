"""A fair share of a server between contexts (issue #54): at most `slots` calls run at once, and when every slot
is taken the next call to run is a waiting one of the context running the fewest — so one context's burst of long
searches queues behind itself while another context's call takes the next free slot; a context with no call running
or waiting starts its call at once (up to twice the slots in all). While several contexts have calls (running, waiting,
or one ended within `RECENT`), each runs at most its share of the cores — the slots (two a core) over twice their
number, at least one — and a slot no context under its share waits for stays free: a noisy context's long calls
would otherwise fill every core beside a quiet one's (its recall 3.9x slower beside twelve threads of k-100 recalls,
2.5x with two slots; #54). Alone, a context may use every slot.

With `engram serve --workers N` the share is of the machine: a worker reads what the others run
(`engram.trust.peers`), counts the contexts sharing on any of them and a context's calls running on all of them
against its share, and while a slot stays free beside a waiting call (another worker's calls hold the share) it
looks again every `POLL` (a callback on its event loop). Alone on the machine, a context may use every slot of each
worker.

A share of slots is not a share of the interpreter: the running calls of two contexts still take turns on its lock,
and a quiet context's recall ran ~1.8x slower beside one k-100 recall of a noisy one. So a read of a context with
calls waiting gives way (`way`, at points in a read where it holds no lock: `engram.kernel.load.give_way`) while a
call of a context with none waiting runs — for at most `WAY` over the whole read, so a light context's long call (an
upload, say) or a stream of light calls slows a heavy context's reads without stopping them.

Written here rather than taken from a library: anyio's `CapacityLimiter` (and asyncio's semaphores) wake waiters in
arrival order, with no notion of whose call is waiting; the policy is a few lines over `anyio.Event`. Idle, a call
takes a slot with no await (a look at which contexts have calls, and two additions). All state lives on the event
loop's thread (no lock); a call's thread only reads `waiting` and `clear`."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from engram.kernel import load
from engram.trust.peers import RUNNING, WAITING, Peers, bucket

if TYPE_CHECKING:
    import anyio

RECENT = 0.1  # s after its last call ends that a context still counts as sharing the cores (a client's next call)
WAY = 0.1  # s: the most a read gives way in all
POLL = 0.005  # s between looks at the other workers while a call waits (with `engram serve --workers`)


class _Ticket:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        import anyio  # the web layer's: a Lambda function that serves no HTTP (the authorizer) never waits here

        self.event: anyio.Event = anyio.Event()
        self.granted = False


class FairShare:
    def __init__(self, slots: int, peers: Peers | None = None) -> None:
        self.slots = max(1, slots)
        self.peers = peers  # the other workers' calls, with `engram serve --workers`
        self.running = 0
        self.active: dict[str, int] = {}  # calls running, by context
        self.waiting: dict[str, deque[_Ticket]] = {}  # calls waiting, by context (in arrival order)
        self.ended: dict[str, float] = {}  # when a context's last call ended, while RECENT
        self.clear = threading.Event()  # set while no call of a context with none waiting runs beside one waiting
        self.clear.set()
        self.polling = False  # a look at the other workers is due (with peers)

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Run the body in one of the slots, `key`'s turn decided as described above."""
        if (self.running < self.slots and not self.waiting and self._under_share(key)) or self._first_of(key):
            self._take(key)
            self._mark()
        else:
            ticket = _Ticket()
            self.waiting.setdefault(key, deque()).append(ticket)
            self._count(key, waiting=1)
            if self.peers is not None:  # a free slot it may not take now: look again while it waits
                self._grant()
            self._mark()
            try:
                await ticket.event.wait()
            except BaseException:  # cancelled while waiting: give the slot on if it had been granted meanwhile
                if ticket.granted:
                    self._give(key)
                else:
                    self._drop(key, ticket)
                self._mark()
                raise
        try:
            yield
        finally:
            self._give(key)
            self._mark()

    def way(self, key: str) -> Callable[[], None]:
        """A read's `give_way` (on its thread) for context `key`: while `key` has calls waiting and a call of a
        context with none waiting runs, it waits for that to end, at most `WAY` in all over the read; otherwise it
        goes on at once (a look at two fields)."""
        left = [WAY]

        def give() -> None:
            if left[0] > 0 and key in self.waiting and not self.clear.is_set():
                began = time.monotonic()
                self.clear.wait(left[0])
                left[0] -= time.monotonic() - began

        return give

    def _mark(self) -> None:
        """`clear` as the contexts running and waiting now say (after every change, on the event loop's thread)."""
        light = bool(self.waiting) and any(k not in self.waiting for k in self.active)
        if light == self.clear.is_set():
            if light:
                self.clear.clear()
            else:
                self.clear.set()

    def _first_of(self, key: str) -> bool:
        """A call of a context with none running or waiting starts at once, past a full house (up to twice the
        slots): a quiet tenant's call never waits for a noisy one's long calls to end (with four slots held by
        another context's k-100 searches, it waited: 3.2x its p50 alone; #54)."""
        first = key not in self.active and key not in self.waiting and self.running < 2 * self.slots
        return first and (self.peers is None or not self.peers.busy(key))

    def _under_share(self, key: str) -> bool:
        """Whether `key` runs fewer calls than its share: every slot when no other context has calls, else the
        slots over twice the contexts that do (at least one)."""
        now = time.monotonic()
        for k in [k for k, t in self.ended.items() if now - t >= RECENT]:
            del self.ended[k]
        sharing = self.active.keys() | self.waiting.keys() | self.ended.keys() | {key}
        running = self.active.get(key, 0)
        if self.peers is None:
            contexts = len(sharing)
        else:  # of the machine: the contexts sharing any worker, `key`'s calls on all of them
            contexts = len({bucket(k) for k in sharing} | self.peers.sharing(now, RECENT))
            if contexts > 1:
                running += self.peers.running(key)
        share = self.slots if contexts == 1 else max(1, self.slots // (2 * contexts))
        return running < share

    def _take(self, key: str) -> None:
        self.running += 1
        load.started()
        self.active[key] = self.active.get(key, 0) + 1
        self._count(key, running=1)

    def _count(self, key: str, running: int = 0, waiting: int = 0) -> None:
        """The other workers' view of `key` moved (nothing without peers)."""
        if self.peers is not None:
            if running:
                self.peers.add(key, RUNNING, running)
            if waiting:
                self.peers.add(key, WAITING, waiting)

    def _drop(self, key: str, ticket: _Ticket) -> None:
        queue = self.waiting.get(key)
        if queue is not None:
            queue.remove(ticket)
            self._count(key, waiting=-1)
            if not queue:
                del self.waiting[key]

    def _give(self, key: str) -> None:
        """A call of `key` ends: its slot goes to the waiting call of the context running the fewest; among equals,
        the one served longest ago (a context goes to the back of the line as it is served, and as a call of it
        ends)."""
        self.running -= 1
        load.ended()
        left = self.active[key] - 1
        if left:
            self.active[key] = left
        else:
            del self.active[key]
        self.ended[key] = time.monotonic()
        self._count(key, running=-1)
        if self.peers is not None:
            self.peers.ended(key, self.ended[key])
        if key in self.waiting:
            self.waiting[key] = self.waiting.pop(key)
        self._grant()

    def _grant(self) -> None:
        """Free slots to waiting calls under their share, the context running the fewest first."""
        while self.waiting and self.running < self.slots:
            under = [k for k in self.waiting if self._under_share(k)]
            if not under:  # every waiting context runs its share: the slot waits for one that does not
                self._look_again()
                break
            after = min(under, key=lambda k: self.active.get(k, 0))
            queue = self.waiting[after]
            ticket = queue.popleft()
            del self.waiting[after]
            if queue:
                self.waiting[after] = queue
            ticket.granted = True
            self._count(after, waiting=-1)
            self._take(after)
            ticket.event.set()

    def _look_again(self) -> None:
        """With peers, grant again in `POLL`: a call ending on another worker frees a share with no word to this one."""
        if self.peers is not None and not self.polling:
            import asyncio

            self.polling = True
            asyncio.get_running_loop().call_later(POLL, self._poll)

    def _poll(self) -> None:
        self.polling = False
        self._grant()
        self._mark()
