"""Quotas (issue #28): what one context, and one key in a context, may consume.

Four limits, each per context and per key (a key acting in a context; OAuth principals too): requests per
minute, writes per day (calls of a tool that writes), stored bytes (the bytes of the arguments of every call that
writes, counted as they come in; not given back on delete), embeddings per day. Limits are set by management
(`quota_set`, `engram quota set`) or come from the settings' defaults (`ENGRAM_QUOTA_CONTEXT`,
`ENGRAM_QUOTA_KEY`); a limit left unset is no limit, and with no limit anywhere nothing is counted.

A call is admitted before it runs: every counter it needs is taken atomically (`Counters.add` with the limit),
and if one is full, those taken are given back and the call is refused with 429 and the seconds until the
window turns (`Retry-After`) — before anything is written. A call that fails gives back its write and its
bytes. Embeddings are known only once a call has run: a call is refused once the day's count has reached the
limit, and adds what it computed afterwards (one call may take the count past the limit by its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engram.kernel.clock import Clock
from engram.kernel.errors import RateLimited
from engram.kernel.expiring import Expiring
from engram.kernel.ports import Counters, Item, RecordStore, Write
from engram.kernel.retry import on_conflict

SYSTEM = "_system"
QUOTA = "quota"
CACHE_SECONDS = 10.0  # how long a process keeps a context's quota records before reading them again
BYTES_RETRY = 3600  # stored bytes do not come back with time: ask again in an hour (or after an erasure)


class QuotaLimits(BaseModel):
    """Limits; None: no limit (or, in a stored quota, the settings' default)."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(None, ge=0, le=10**9)
    writes_per_day: int | None = Field(None, ge=0, le=10**12)
    stored_bytes: int | None = Field(None, ge=0, le=10**15)
    embeddings_per_day: int | None = Field(None, ge=0, le=10**12)

    def over(self, defaults: QuotaLimits) -> QuotaLimits:
        """These limits, with the defaults' where these have none."""
        mine = self.model_dump()
        return QuotaLimits(**{k: mine[k] if mine[k] is not None else v for k, v in defaults.model_dump().items()})

    def any(self) -> bool:
        return any(v is not None for v in self.model_dump().values())


@dataclass
class Ticket:
    """What an admitted call took, to give back if it fails and to add its embeddings to when it succeeds."""

    quotas: Quotas | None = None
    taken: list[tuple[str, int]] = field(default_factory=list)  # (counter, amount) given back on failure
    embedding_counters: list[tuple[str, datetime]] = field(default_factory=list)

    def failed(self) -> None:
        if self.quotas is not None:
            self.quotas.give_back(self.taken)

    def done(self, embeddings: int) -> None:
        if self.quotas is not None and embeddings:
            self.quotas.add_embeddings(self.embedding_counters, embeddings)


NO_TICKET = Ticket()


def _limits(data: dict[str, Any]) -> QuotaLimits:
    return QuotaLimits(**{k: data.get(k) for k in QuotaLimits.model_fields})


class Quotas:
    def __init__(
        self,
        records: RecordStore,
        counters: Counters | None,
        clock: Clock,
        context_default: QuotaLimits,
        key_default: QuotaLimits,
    ) -> None:
        self._records, self._counters, self._clock = records, counters, clock
        self.context_default, self.key_default = context_default, key_default
        self._cache: Expiring[str, QuotaLimits | None] = Expiring(CACHE_SECONDS, 10_000)

    # -- configuration -----------------------------------------------------------------------------

    def _id(self, context_id: str, key_id: str | None) -> str:
        return context_id if key_id is None else f"{context_id}:{key_id}"

    def set(self, context_id: str, key_id: str | None, limits: QuotaLimits, actor: str) -> QuotaLimits:
        """Replace the quota of a context (or of a key in it); concurrent setters: the last one wins whole."""
        qid = self._id(context_id, key_id)
        data = {"context_id": context_id, "key_id": key_id, **limits.model_dump()}

        def write() -> None:  # over the version read; another setter between: read again
            item = self._records.get(SYSTEM, QUOTA, qid)
            expected = item.version if item else 0
            self._records.transact(
                [Write(SYSTEM, QUOTA, qid, data, actor, expected_version=expected)], self._clock.now()
            )

        on_conflict(write)
        self._cache.drop(qid)
        return limits

    def _load(self, missing: list[str]) -> dict[str, QuotaLimits | None]:
        return self._limits_of(missing, self._records.get_many(SYSTEM, QUOTA, missing))

    @staticmethod
    def _limits_of(missing: list[str], items: dict[str, Item]) -> dict[str, QuotaLimits | None]:
        return {q: _limits(items[q].data) if q in items else None for q in missing}

    def _stored(self, qids: list[str]) -> dict[str, QuotaLimits | None]:
        """The stored quotas of these ids, read in one call when any is not cached."""
        return self._cache.get_many(qids, self._load)

    def prime(self, context_id: str, key_id: str, read: Callable[[list[str]], dict[str, Item]] | None = None) -> None:
        """A call of this key in this context is coming: start reading its quotas (a cold instance's first call
        then waits less for them). `read`: how their records are read (with other reads, in one request)."""
        load = self._load if read is None else lambda missing: self._limits_of(missing, read(missing))
        self._cache.prefetch(self.ids(context_id, key_id), load)

    def ids(self, context_id: str, key_id: str) -> list[str]:
        """The ids of the quota records a call of this key reads: its context's, its own."""
        return [self._id(context_id, None), self._id(context_id, key_id)]

    def stored(self, context_id: str, key_id: str | None) -> QuotaLimits | None:
        qid = self._id(context_id, key_id)
        return self._stored([qid])[qid]

    def limits(self, context_id: str, key_id: str | None) -> QuotaLimits:
        """The limits in force: the stored ones over the settings' defaults."""
        return self._in_force(key_id is None, self.stored(context_id, key_id))

    def _in_force(self, of_context: bool, stored: QuotaLimits | None) -> QuotaLimits:
        default = self.context_default if of_context else self.key_default
        return stored.over(default) if stored is not None else default

    # -- admission ---------------------------------------------------------------------------------

    def _windows(self, now: datetime) -> tuple[str, datetime, str, datetime]:
        minute = now.replace(second=0, microsecond=0)
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return (minute.strftime("%Y%m%d%H%M"), minute + timedelta(minutes=1),
                day.strftime("%Y%m%d"), day + timedelta(days=1))  # fmt: skip

    def admit(self, context_id: str, key_id: str, writes: bool, size: Callable[[], int]) -> Ticket:
        """Take what the call needs of every quota in force, or refuse it (RateLimited: 429) taking nothing."""
        cid, kid = self._id(context_id, None), self._id(context_id, key_id)
        stored = self._stored([cid, kid])  # one read for both when neither is cached (a cold start's first call)
        scopes = [(f"c:{context_id}", self._in_force(True, stored[cid])),
                  (f"k:{context_id}:{key_id}", self._in_force(False, stored[kid]))]  # fmt: skip
        scopes = [(s, lim) for s, lim in scopes if lim.any()]
        if not scopes or self._counters is None:
            return NO_TICKET
        now = self._clock.now()
        minute, minute_end, day, day_end = self._windows(now)
        ticket = Ticket(self)
        # requests first, in every scope (a request refused for a write quota was still a request), then writes
        needs: list[tuple[str, str, int, int | None, datetime | None, str, datetime | None]] = []
        for scope, lim in scopes:
            if lim.requests_per_minute is not None:
                needs.append((scope, f"{scope}:rpm:{minute}", 1, lim.requests_per_minute,
                              minute_end + timedelta(minutes=1), "requests per minute", minute_end))  # fmt: skip
        for scope, lim in scopes if writes else ():
            if lim.writes_per_day is not None:
                needs.append((scope, f"{scope}:wpd:{day}", 1, lim.writes_per_day, day_end + timedelta(days=1),
                              "writes per day", day_end))  # fmt: skip
            if lim.stored_bytes is not None:
                needs.append((scope, f"{scope}:bytes", size(), lim.stored_bytes, None, "stored bytes", None))
        for scope, name, amount, limit, expires, what, turns in needs:
            if self._counters.add(name, amount, limit, expires, now) is None:
                self.give_back(ticket.taken)
                raise self._refusal(scope, what, limit, turns, now)
            ticket.taken.append((name, amount))
        for scope, lim in scopes:
            if lim.embeddings_per_day is not None:
                name = f"{scope}:epd:{day}"
                if self._counters.value(name, now) >= lim.embeddings_per_day:
                    self.give_back(ticket.taken)
                    raise self._refusal(scope, "embeddings per day", lim.embeddings_per_day, day_end, now)
                ticket.embedding_counters.append((name, day_end + timedelta(days=1)))
        return ticket

    def _refusal(self, scope: str, what: str, limit: int | None, turns: datetime | None, now: datetime) -> RateLimited:
        retry = max(1, int((turns - now).total_seconds()) + 1) if turns is not None else BYTES_RETRY
        whose = "this context's" if scope.startswith("c:") else "this key's"
        return RateLimited(
            f"over {whose} quota of {limit} {what}; retry after {retry} s",
            retry_after=retry,
            code="quota_exceeded",
            details={"quota": what.replace(" ", "_"), "limit": limit, "scope": "context" if scope[0] == "c" else "key"},
        )

    def give_back(self, taken: list[tuple[str, int]]) -> None:
        if self._counters is None:
            return
        now = self._clock.now()
        for name, amount in taken:
            if amount and ":rpm:" not in name:  # a request that was made stays made
                self._counters.add(name, -amount, None, None if name.endswith(":bytes") else now + timedelta(days=2),
                                   now)  # fmt: skip

    def add_embeddings(self, counters: list[tuple[str, datetime]], count: int) -> None:
        if self._counters is None:
            return
        now = self._clock.now()
        for name, expires in counters:
            self._counters.add(name, count, None, expires, now)

    # -- reporting ---------------------------------------------------------------------------------

    def use(self, context_id: str, key_id: str | None) -> dict[str, Any]:
        """Each quota in force for a context (or a key in it): its limit and what is used of it now."""
        lim = self.limits(context_id, key_id)
        scope = f"c:{context_id}" if key_id is None else f"k:{context_id}:{key_id}"
        now = self._clock.now()
        minute, _, day, _ = self._windows(now)
        names = {"requests_per_minute": f"{scope}:rpm:{minute}", "writes_per_day": f"{scope}:wpd:{day}",
                 "stored_bytes": f"{scope}:bytes", "embeddings_per_day": f"{scope}:epd:{day}"}  # fmt: skip
        out: dict[str, Any] = {}
        for what, limit in lim.model_dump().items():
            used = self._counters.value(names[what], now) if self._counters is not None and limit is not None else None
            out[what] = {"limit": limit, "used": used}
        return out
