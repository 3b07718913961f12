"""The audit trail: who called what, on which objects, with what outcome — never a payload.

Every operation (reads included) leaves one entry in its context's append-only log (`AuditLog`: SQLite
locally, the DynamoDB table on AWS, with a retention TTL). The log is a keyed hash chain (`Chain`): each entry
carries the hash of the entry before it and its own HMAC-SHA256 (`cryptography`) over its content under the
deployment's audit key, so an entry edited, removed or inserted anywhere is found, and re-sealing the entries
after an edit needs the key, not just the algorithm. Each entry also carries when the entry before it expires
(`prev_expires_at`): a log whose oldest kept entry follows one that had not expired yet was cut at its start.
And a high-water mark kept apart from the log (`AuditMark`: another file locally, another item on AWS), moved
with every append and bound to the key, names the last entry: a log cut at its end, or emptied, is found too.
Retention moves the start forward (entries expire), never a caller. What the entry names are object ids (from
the call's arguments and its result), so erasing a subject's content leaves the trail as it is.

Entries sealed before the key (an unkeyed SHA-256, `legacy_seal`) still verify, but only before the first keyed
entry: after it an unkeyed one is a re-sealed entry.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import math
import re
import secrets
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac

from engram.kernel.clock import Clock, is_generated_id, iso, parse_time
from engram.kernel.errors import Conflict, InvalidInput
from engram.kernel.ports import AuditEntry, AuditLog, AuditMark, RecordStore, Write

log = logging.getLogger("engram.trust.audit")

MAX_OBJECTS = 50  # object ids an entry names at most
MAX_ID = 256  # characters of each
SCAN_LIMIT = 10_000  # entries one query looks at before it answers with a cursor to go on from
KEYED = "k1:"  # the prefix of a keyed entry's hash (HMAC-SHA256, hex)
# An argument that names objects: `id`, `ids`, `*_id(s)`, `*Id(s)`, `path(s)`, `*_path`, `key(s)`.
_NAMES_OBJECTS = re.compile(r"(?:^|_)(?:ids?|paths?|keys?)$|Ids?$")
_RESULT_IDS = re.compile(r"(?:^|_)ids?$|Ids?$")  # in a result, only ids (its `key`s and `path`s are data)
_NOT_OBJECTS = {"context_id", "agent_id", "session_id_prefix"}


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def legacy_seal(context_id: str, seq: int, at: datetime, data: Mapping[str, Any], prev: str) -> str:
    """The hash of an entry sealed before the chain was keyed: SHA-256 over its canonical JSON."""
    body = {"context_id": context_id, "seq": seq, "at": iso(at), "data": data, "prev": prev}
    return hashlib.sha256(_canonical(body)).hexdigest()


class Chain:
    """Seals and checks entries and marks with the deployment's audit key (32 bytes, `key()` read when first
    needed: `stored_key`, or a secret the deployment keeps)."""

    def __init__(self, key: Callable[[], bytes]) -> None:
        self._load, self._key = key, b""

    def _mac(self, body: Mapping[str, Any]) -> str:
        if not self._key:
            self._key = self._load()
        h = crypto_hmac.HMAC(self._key, hashes.SHA256())
        h.update(_canonical(body))
        return KEYED + h.finalize().hex()

    def seal(self, context_id: str, seq: int, at: datetime, data: Mapping[str, Any], prev: str) -> str:
        return self._mac({"context_id": context_id, "seq": seq, "at": iso(at), "data": data, "prev": prev})

    def entry(
        self, context_id: str, seq: int, at: datetime, data: dict[str, Any], prev: str, prev_expires: datetime | None
    ) -> tuple[dict[str, Any], str]:
        stored = {**data, "prev_expires_at": iso(prev_expires)} if seq > 1 else dict(data)
        return stored, self.seal(context_id, seq, at, stored, prev)

    def mark(self, context_id: str, seq: int, hash: str, expires_at: datetime | None) -> str:
        return self._mac({"mark": context_id, "seq": seq, "hash": hash, "expires_at": iso(expires_at)})

    def opaque(self, context_id: str, object_id: str) -> str:
        """What an entry keeps of an object id: the id itself when Engram made it (`is_generated_id`: it carries
        nothing a person wrote), else a keyed hash (`h:`, per context) — an entity's `Person:alice`, a context
        key or a path may hold a name, and the trail outlives an erasure of it. `audit_query`'s `object_id`
        finds either."""
        if is_generated_id(object_id):
            return object_id
        return "h:" + self._mac({"object": object_id, "context_id": context_id})[len(KEYED) : len(KEYED) + 32]

    def holds(self, e: AuditEntry) -> bool:
        """Whether an entry's hash is its content's: keyed, or (an entry from before the key) unkeyed."""
        if e.hash.startswith(KEYED):
            return secrets.compare_digest(e.hash, self.seal(e.context_id, e.seq, e.at, e.data, e.prev))
        return e.hash == legacy_seal(e.context_id, e.seq, e.at, e.data, e.prev)

    def mark_holds(self, m: AuditMark) -> bool:
        return secrets.compare_digest(m.mac, self.mark(m.context_id, m.seq, m.hash, m.expires_at))


AUDIT_KEY = ("_system", "auditkey", "hmac")  # where a deployment without a secret of its own keeps the key


def stored_key(records: RecordStore, clock: Clock) -> Callable[[], bytes]:
    """The audit key from the record store (`_system` / auditkey), made on first use by whichever process
    comes first."""

    def load() -> bytes:
        item = records.get(*AUDIT_KEY)
        if item is None:
            fresh = base64.b64encode(secrets.token_bytes(32)).decode()
            with contextlib.suppress(Conflict):  # another process made it first: that one
                records.transact([Write(*AUDIT_KEY, {"key": fresh}, "system", 0)], clock.now())
            item = records.get(*AUDIT_KEY)
        assert item is not None
        return base64.b64decode(item.data["key"])

    return load


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


def problems(entries: Iterator[AuditEntry], chain: Chain, now: datetime) -> Iterator[dict[str, Any]]:
    """What is wrong with a log read in seq order: an entry whose hash is not its content's (or an unkeyed one
    after keyed ones), a gap, an entry that does not chain to the one before it, and a log whose oldest kept entry
    follows one that had not expired (the log was cut at its start). The first entry ever (seq 1) chains to
    nothing."""
    before: AuditEntry | None = None
    keyed = False
    for e in entries:
        if not chain.holds(e):
            yield {"seq": e.seq, "problem": "altered: the entry's hash is not its content's"}
        elif e.hash.startswith(KEYED):
            keyed = True
        elif keyed:
            yield {"seq": e.seq, "problem": "re-sealed: an unkeyed entry after keyed ones"}
        if before is None:
            if e.seq == 1 and e.prev != "":
                yield {"seq": e.seq, "problem": "the first entry chains to an entry before it"}
            elif e.seq > 1 and e.hash.startswith(KEYED):
                expired = parse_time(e.data.get("prev_expires_at"))
                if expired is None or expired - timedelta(seconds=1) > now:  # a store keeping whole seconds
                    yield {"seq": e.seq, "problem": f"entries before {e.seq} were removed inside their retention"}
        elif e.seq != before.seq + 1:
            yield {"seq": e.seq, "problem": f"entries {before.seq + 1}..{e.seq - 1} are missing"}
        elif e.prev != before.hash:
            yield {"seq": e.seq, "problem": "does not chain to the entry before it"}
        before = e


def mark_problems(
    mark: AuditMark | None, last: AuditEntry | None, at_mark: AuditEntry | None, chain: Chain, now: datetime
) -> list[dict[str, Any]]:
    """What the high-water mark says of a log's end: `last` its newest kept entry, `at_mark` the entry the mark
    names (if kept)."""
    if mark is None:
        if last is not None and last.hash.startswith(KEYED):
            return [{"seq": last.seq, "problem": "the high-water mark kept apart from the log is missing"}]
        return []
    if not chain.mark_holds(mark):
        return [{"seq": mark.seq, "problem": "the high-water mark was altered"}]
    if last is None or last.seq < mark.seq:
        if mark.expires_at is not None and mark.expires_at <= now:  # retention took them all
            return []
        after = last.seq if last is not None else 0
        return [{"seq": mark.seq, "problem": f"entries {after + 1}..{mark.seq} were removed from the log's end"}]
    if at_mark is not None and at_mark.hash != mark.hash:
        return [{"seq": mark.seq, "problem": "the entry the high-water mark names was replaced"}]
    return []


class Auditor:
    """Records the calls of every surface (`engram.api.dispatch`), answers `audit_query`, verifies a log."""

    def __init__(self, log_: AuditLog | None, clock: Clock, retention_days: int, chain: Chain) -> None:
        self.log, self.clock, self.chain = log_, clock, chain
        self.retention = timedelta(days=retention_days) if retention_days > 0 else None

    def record(
        self,
        context_id: str,
        *,
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
        data |= {"objects": [self.chain.opaque(context_id, o) for o in objects_], "outcome": outcome, "code": code}
        if cost:
            data["cost"] = dict(cost)
        try:
            self.log.append(context_id, data, now, now + self.retention if self.retention else None, self.chain)
        except Exception:
            log.exception("audit entry for %s in %s not written", tool, context_id)

    def prime(self, context_id: str) -> None:
        """A call in this context began: the log may start reading what its append will need."""
        if self.log is not None:
            try:
                self.log.prime(context_id)
            except Exception:  # the append reads it itself
                log.exception("audit log of %s not primed", context_id)

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
        wanted = self.chain.opaque(context_id, object_id) if object_id is not None else None
        if cursor is not None and (not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18):
            raise InvalidInput("cursor is not one this tool gave", code="invalid_cursor")  # a sequence number
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
                and (object_id is None or wanted in d.get("objects", ()))
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

        now = self.clock.now()
        found = list(problems(walk(), self.chain, now))
        mark = self.log.mark(context_id)
        last = self.log.entries(context_id, descending=True, limit=1, now=now)
        at_mark = self.log.entries(context_id, after=mark.seq - 1, before=mark.seq + 1, now=now) if mark else []
        found += mark_problems(mark, last[0] if last else None, at_mark[0] if at_mark else None, self.chain, now)
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
