"""A fair share of a server between contexts (issue #54): at most `slots` calls run at once, and when every slot
is taken the next call to run is a waiting one of the context running the fewest — so one context's burst of long
searches queues behind itself while another context's call takes the next free slot; a context with no call running
or waiting starts its call at once (up to twice the slots in all).

Written here rather than taken from a library: anyio's `CapacityLimiter` (and asyncio's semaphores) wake waiters in
arrival order, with no notion of whose call is waiting; the policy is a few lines over `anyio.Event`. Idle, a call
takes a slot with two additions and no await. All state lives on the event loop's thread (no lock)."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from engram.kernel import load

if TYPE_CHECKING:
    import anyio


class _Ticket:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        import anyio  # the web layer's: a Lambda function that serves no HTTP (the authorizer) never waits here

        self.event: anyio.Event = anyio.Event()
        self.granted = False


class FairShare:
    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self.running = 0
        self.active: dict[str, int] = {}  # calls running, by context
        self.waiting: dict[str, deque[_Ticket]] = {}  # calls waiting, by context (in arrival order)

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        """Run the body in one of the slots, `key`'s turn decided as described above."""
        if (self.running < self.slots and not self.waiting) or self._first_of(key):
            self._take(key)
        else:
            ticket = _Ticket()
            self.waiting.setdefault(key, deque()).append(ticket)
            try:
                await ticket.event.wait()
            except BaseException:  # cancelled while waiting: give the slot on if it had been granted meanwhile
                if ticket.granted:
                    self._give(key)
                else:
                    self._drop(key, ticket)
                raise
        try:
            yield
        finally:
            self._give(key)

    def _first_of(self, key: str) -> bool:
        """A call of a context with none running or waiting starts at once, past a full house (up to twice the
        slots): a quiet tenant's call never waits for a noisy one's long calls to end (with four slots held by
        another context's k-100 searches, it waited: 3.2x its p50 alone; #54)."""
        return key not in self.active and key not in self.waiting and self.running < 2 * self.slots

    def _take(self, key: str) -> None:
        self.running += 1
        load.started()
        self.active[key] = self.active.get(key, 0) + 1

    def _drop(self, key: str, ticket: _Ticket) -> None:
        queue = self.waiting.get(key)
        if queue is not None:
            queue.remove(ticket)
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
        if key in self.waiting:
            self.waiting[key] = self.waiting.pop(key)
        while self.waiting and self.running < self.slots:
            after = min(self.waiting, key=lambda k: self.active.get(k, 0))
            queue = self.waiting[after]
            ticket = queue.popleft()
            del self.waiting[after]
            if queue:
                self.waiting[after] = queue
            ticket.granted = True
            self._take(after)
            ticket.event.set()
