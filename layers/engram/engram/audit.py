"""The audit trail: who called what, on which objects, with what outcome — never a payload.

Every operation (reads included) leaves one entry in its context's append-only log (`AuditLog`: SQLite
locally, the DynamoDB table on AWS, with a retention TTL). Entries are hash-chained: each carries the hash of
the entry before it and its own hash over its content (`seal`), so `verify` finds an entry edited, removed or
inserted anywhere after the oldest one kept (retention removes entries from the start only, and the chain
then starts at the oldest one left). What the entry names are object ids (from the call's arguments and its
result), so erasing a subject's content leaves the trail as it is: it holds no content to remove.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from engram.clock import Clock, iso, parse_time
from engram.errors import InvalidInput
from engram.ports import AuditEntry, AuditLog

log = logging.getLogger("engram.audit")

MAX_OBJECTS = 50  # object ids an entry names at most
MAX_ID = 256  # characters of each
SCAN_LIMIT = 10_000  # entries one query looks at before it answers with a cursor to go on from
# An argument that names objects: `id`, `ids`, `*_id(s)`, `*Id(s)`, `path(s)`, `*_path`, `key(s)`.
_NAMES_OBJECTS = re.compile(r"(?:^|_)(?:ids?|paths?|keys?)$|Ids?$")
_RESULT_IDS = re.compile(r"(?:^|_)ids?$|Ids?$")  # in a result, only ids (its `key`s and `path`s are data)
_NOT_OBJECTS = {"context_id", "agent_id", "session_id_prefix"}


def seal(context_id: str, seq: int, at: datetime, data: Mapping[str, Any], prev: str) -> str:
    """The hash of an entry: SHA-256 over its canonical JSON (sorted keys, no spaces), which includes `prev`."""
    body = {"context_id": context_id, "seq": seq, "at": iso(at), "data": data, "prev": prev}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def id_arguments(args: Any) -> dict[str, Any]:
    """The arguments of an operation's input model that name objects (read without dumping the model)."""
    return {n: getattr(args, n) for n in type(args).model_fields if n not in _NOT_OBJECTS and _NAMES_OBJECTS.search(n)}


def objects(args: Mapping[str, Any], result: Any) -> list[str]:
    """The object ids a call names: its arguments that name objects (ids, paths, keys), and the result's id
    fields, at its top level and in each item of its lists (at most MAX_OBJECTS, each cut to MAX_ID
    characters)."""
    out: dict[str, None] = {}

    def add(value: Any) -> None:
        if isinstance(value, str) and value and len(out) < MAX_OBJECTS:
            out[value[:MAX_ID]] = None
        elif isinstance(value, list | tuple):
            for v in value[:MAX_OBJECTS]:
                add(v)

    def named(fields: Mapping[str, Any], pattern: re.Pattern[str]) -> None:
        for name, value in fields.items():
            if name not in _NOT_OBJECTS and pattern.search(name):
                add(value)

    named(args, _NAMES_OBJECTS)
    if isinstance(result, dict):
        named(result, _RESULT_IDS)
        for value in result.values():
            if isinstance(value, list):
                for item in value[:MAX_OBJECTS]:
                    if isinstance(item, dict):
                        named(item, _RESULT_IDS)
    return list(out)


def problems(entries: Iterator[AuditEntry]) -> Iterator[dict[str, Any]]:
    """What is wrong with a log read in seq order: an entry whose hash is not its content's, a gap, or an
    entry that does not chain to the one before it. The first entry may follow entries retention removed; the
    first entry ever (seq 1) chains to nothing."""
    before: AuditEntry | None = None
    for e in entries:
        if seal(e.context_id, e.seq, e.at, e.data, e.prev) != e.hash:
            yield {"seq": e.seq, "problem": "altered: the entry's hash is not its content's"}
        if before is None:
            if e.seq == 1 and e.prev != "":
                yield {"seq": e.seq, "problem": "the first entry chains to an entry before it"}
        elif e.seq != before.seq + 1:
            yield {"seq": e.seq, "problem": f"entries {before.seq + 1}..{e.seq - 1} are missing"}
        elif e.prev != before.hash:
            yield {"seq": e.seq, "problem": "does not chain to the entry before it"}
        before = e


class Auditor:
    """Records the calls of every surface (`engram.api.dispatch`), answers `audit_query`, verifies a log."""

    def __init__(self, log_: AuditLog | None, clock: Clock, retention_days: int) -> None:
        self.log, self.clock = log_, clock
        self.retention = timedelta(days=retention_days) if retention_days > 0 else None

    def record(
        self,
        context_id: str,
        key_id: str,
        principal: str,
        tool: str,
        transport: str,
        objects_: list[str],
        outcome: str,
        code: str = "",
        cost: Mapping[str, float] | None = None,
    ) -> None:
        """One entry (with what the call cost: `usage_report` sums them); a failure to append is logged, not
        raised (the call's own outcome stands)."""
        if self.log is None:
            return
        now = self.clock.now()
        data: dict[str, Any] = {"key_id": key_id, "principal": principal, "tool": tool, "transport": transport}
        data |= {"objects": objects_, "outcome": outcome, "code": code}
        if cost:
            data["cost"] = dict(cost)
        try:
            self.log.append(context_id, data, now, now + self.retention if self.retention else None)
        except Exception:
            log.exception("audit entry for %s in %s not written", tool, context_id)

    def _scan(self, context_id: str, before: int | None) -> Iterator[AuditEntry]:
        assert self.log is not None
        while True:
            page = self.log.entries(context_id, before=before, limit=500, descending=True, now=self.clock.now())
            yield from page
            if len(page) < 500:
                return
            before = page[-1].seq

    def query(
        self,
        context_id: str,
        since: str | None = None,
        until: str | None = None,
        principal: str | None = None,
        key_id: str | None = None,
        tool: str | None = None,
        object_id: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
        keys: Collection[str] | None = None,
    ) -> dict[str, Any]:
        """Entries newest first, filtered (`keys`: only calls of those keys); `next_cursor` goes on where this page
        stopped (a page looks at no more than SCAN_LIMIT entries)."""
        if self.log is None:
            return {"entries": [], "next_cursor": None, "scanned": 0}
        lo, hi = parse_time(since), parse_time(until)
        if cursor is not None and not cursor.isdigit():
            raise InvalidInput("cursor is not one this tool gave")
        before = int(cursor) if cursor is not None else None
        found: list[dict[str, Any]] = []
        scanned, last = 0, None
        for e in self._scan(context_id, before):
            scanned, last = scanned + 1, e.seq
            if lo is not None and e.at < lo - timedelta(minutes=1):  # entries are in time order, give or take
                last = None
                break
            d = e.data
            if (
                (lo is None or e.at >= lo)
                and (hi is None or e.at <= hi)
                and principal in (None, d.get("principal"))
                and key_id in (None, d.get("key_id"))
                and (keys is None or d.get("key_id") in keys)
                and tool in (None, d.get("tool"))
                and (object_id is None or object_id in d.get("objects", ()))
            ):
                found.append({"seq": e.seq, "at": iso(e.at), **d, "hash": e.hash})
            if len(found) >= limit or scanned >= SCAN_LIMIT:
                break
        else:
            last = None
        more = last is not None and last > 1
        return {"entries": found, "next_cursor": str(last) if more else None, "scanned": scanned}

    def usage(
        self,
        context_id: str,
        since: datetime,
        until: datetime,
        key_id: str | None = None,
        tool: str | None = None,
        keys: Collection[str] | None = None,
    ) -> list[dict[str, Any]]:
        """What the context's calls cost, per day, key and tool (from the trail: each entry keeps its call's
        cost): calls, errors, p50 / p99 server ms, and every cost figure summed (`keys`: of those keys only)."""
        if self.log is None:
            raise InvalidInput("usage is read from the audit trail, which is off here (ENGRAM_AUDIT)")
        groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for e in self._scan(context_id, None):
            if e.at < since - timedelta(minutes=1):
                break
            d = e.data
            if e.at < since or e.at > until or key_id not in (None, d.get("key_id")) or tool not in (None, d["tool"]):
                continue
            if keys is not None and d.get("key_id") not in keys:
                continue
            group = groups.setdefault(
                (e.at.date().isoformat(), str(d.get("key_id")), str(d["tool"])),
                {"calls": 0, "errors": 0, "ms": [], "cost": {}},
            )
            group["calls"] += 1
            group["errors"] += d.get("outcome") != "ok"
            cost = d.get("cost") or {}
            group["ms"].append(float(cost.get("server_ms", 0.0)))
            for k, v in cost.items():
                if k != "server_ms" and isinstance(v, int | float):
                    group["cost"][k] = group["cost"].get(k, 0) + v
        out = []
        for (day, key, name), g in sorted(groups.items()):
            ms = sorted(g["ms"])
            out.append({"day": day, "key_id": key, "tool": name, "calls": g["calls"], "errors": g["errors"],
                        "p50_ms": round(_rank(ms, 0.50), 2), "p99_ms": round(_rank(ms, 0.99), 2),
                        "cost": {k: round(v, 2) for k, v in sorted(g["cost"].items())}})  # fmt: skip
        return out

    def verify(self, context_id: str) -> dict[str, Any]:
        """The whole log checked in seq order: entries, the first and last seq, and every problem found."""
        if self.log is None:
            return {"context_id": context_id, "ok": True, "entries": 0, "first": None, "last": None, "problems": []}
        seen = {"n": 0, "first": None, "last": None}

        def walk() -> Iterator[AuditEntry]:
            assert self.log is not None
            after = 0
            while True:
                page = self.log.entries(context_id, after=after, limit=1000, now=self.clock.now())
                for e in page:
                    seen["n"] = int(seen["n"] or 0) + 1
                    seen["first"] = seen["first"] or e.seq
                    seen["last"] = e.seq
                    yield e
                if len(page) < 1000:
                    return
                after = page[-1].seq

        found = list(problems(walk()))
        return {
            "context_id": context_id,
            "ok": not found,
            "entries": seen["n"],
            "first": seen["first"],
            "last": seen["last"],
            "problems": found[:100],
        }


def _rank(values: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted values (0 for none)."""
    if not values:
        return 0.0
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]
