"""Working context (Cortex's `context_*` tools): small JSON values by key, versioned, with an optional time
to live and an optional run, for an agent's scratch state.

A key lives in a context (the tenant), in a run (`run_id`; none is a run of its own) and under the scope
set its writer writes with (the key's grant, as every write): the same key in two runs, or written under
two scope sets, is two keys. Each is one `ctxkey` record, so every write is a new version in the store's
history (`context_history`), an expired key is invisible at once (the store hides what `expires_at` has
passed, whatever a TTL sweeper does later), and a merge is a read, a pure function of the old value, and a
write with the read version expected — retried on a conflict, so concurrent merges all land, one after the
other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote

from engram.kernel.caller import Caller
from engram.kernel.clock import iso
from engram.kernel.errors import Conflict, InvalidInput, NotFound
from engram.kernel.ports import Item, Write
from engram.kernel.retry import ATTEMPTS, on_conflict
from engram.kernel.scopes import can_see, tags_key
from engram.kernel.services import BaseService
from engram.trust.erasure import Subject, Unit, batched, mine

KIND = "ctxkey"
MAX_VALUE_BYTES = 256 * 1024  # a value as JSON (DynamoDB's item limit is 400 KB: room for the rest)
MAX_KEY = 512
MAX_RUN = 128
MAX_TTL = 10 * 365 * 24 * 3600
Strategy = Literal["replace", "merge_shallow", "merge_deep", "append"]


class WorkingContext(BaseService):
    # -- naming ----------------------------------------------------------------------------

    @staticmethod
    def _check(key: str | None, run_id: str | None) -> None:
        if key is not None and (not key or len(key) > MAX_KEY or any(ord(ch) < 32 for ch in key)):
            raise InvalidInput(f"key must be 1 to {MAX_KEY} characters, without control characters")
        if run_id is not None and (not run_id or len(run_id) > MAX_RUN):
            raise InvalidInput(f"run_id must be 1 to {MAX_RUN} characters")

    def _prefix(self, caller: Caller, run_id: str | None) -> tuple[str, list[str]]:
        """The record id prefix of the caller's keys in a run, and the scopes its writes carry."""
        scopes = self.identity.write_scopes(caller, None)
        return f"{tags_key(scopes)}|{quote(run_id or '', safe='')}|", scopes

    def _visible(self, caller: Caller, item: Item | None) -> Item | None:
        if item is None or not can_see(item.data.get("scopes"), self.identity.read_lens(caller, None)):
            return None
        return item

    def _current(self, caller: Caller, key: str, run_id: str | None) -> tuple[str, list[str], Item | None]:
        self._check(key, run_id)
        prefix, scopes = self._prefix(caller, run_id)
        rid = prefix + key
        return rid, scopes, self._visible(caller, self.records.get(caller.context_id, KIND, rid, self.clock.now()))

    @staticmethod
    def _encoded(value: Any) -> None:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
        if size > MAX_VALUE_BYTES:
            raise InvalidInput(f"value is {size} bytes as JSON; the limit is {MAX_VALUE_BYTES} bytes")

    # -- reads -----------------------------------------------------------------------------

    def get(self, caller: Caller, key: str, run_id: str | None) -> dict[str, Any]:
        _, _, item = self._current(caller, key, run_id)
        if item is None:
            raise NotFound(f"no context key {key!r}" + (f" in run {run_id!r}" if run_id else ""))
        return {
            "key": key,
            "value": item.data["value"],
            "version": item.version,
            "expires_at": iso(item.expires_at) if item.expires_at else None,
            "updated_at": iso(item.updated_at),
            "run_id": run_id,
        }

    def keys(self, caller: Caller, prefix: str, run_id: str | None, limit: int) -> dict[str, Any]:
        self._check(None, run_id)
        base, _ = self._prefix(caller, run_id)
        lens = self.identity.read_lens(caller, None)
        keys: list[dict[str, Any]] = []
        cursor: str | None = None
        more = False
        while True:
            page = self.records.query(
                caller.context_id, KIND, prefix=base + prefix, cursor=cursor, limit=limit + 1, now=self.clock.now()
            )
            for item in page.items:
                if not can_see(item.data.get("scopes"), lens):
                    continue
                if len(keys) == limit:
                    more = True
                    break
                keys.append({"key": item.data["key"], "version": item.version, "has_ttl": item.expires_at is not None})
            if more or page.cursor is None:
                break
            cursor = page.cursor
        return {"keys": keys, "has_more": more}

    def history(self, caller: Caller, key: str, run_id: str | None, limit: int) -> dict[str, Any]:
        rid, _, item = self._current(caller, key, run_id)
        if item is None:
            raise NotFound(f"no context key {key!r}" + (f" in run {run_id!r}" if run_id else ""))
        versions = sorted(self.records.history(caller.context_id, KIND, rid), key=lambda i: -i.version)
        return {
            "key": key,
            "versions": [
                {"version": v.version, "value": v.data["value"], "updated_at": iso(v.updated_at), "actor": v.actor}
                for v in versions[:limit]
            ],
        }

    # -- writes ----------------------------------------------------------------------------

    def set(
        self,
        caller: Caller,
        key: str,
        value: Any,
        ttl_seconds: int | None,
        run_id: str | None,
        expected_version: int | None = None,
    ) -> dict[str, Any]:
        self._encoded(value)
        if ttl_seconds is not None and not 1 <= ttl_seconds <= MAX_TTL:
            raise InvalidInput(f"ttl_seconds must be 1 to {MAX_TTL}")

        def attempt() -> dict[str, Any]:
            rid, scopes, item = self._current(caller, key, run_id)
            now = self.clock.now()
            expires = now + timedelta(seconds=ttl_seconds) if ttl_seconds else None
            written = self._write(
                caller,
                rid,
                scopes=scopes,
                key=key,
                run_id=run_id,
                value=value,
                item=item,
                expires=expires,
                expected_version=expected_version,
                now=now,
            )
            return {"key": key, "version": written.version, "expires_at": iso(expires) if expires else None}

        # concurrent sets: the last one wins, each gets its own version (unless the caller named one)
        return on_conflict(attempt, 1 if expected_version is not None else ATTEMPTS, self.sleep)

    def merge(
        self,
        caller: Caller,
        key: str,
        value: Any,
        strategy: Strategy,
        run_id: str | None,
        expected_version: int | None = None,
    ) -> dict[str, Any]:
        """Read, combine, write with the read version expected; on a conflict (another writer came
        between), read again — unless the caller named the version it expects, which is then its answer."""
        self._encoded(value)
        if strategy in ("merge_shallow", "merge_deep") and not isinstance(value, dict):
            raise InvalidInput(f"{strategy} takes an object value")

        def attempt() -> dict[str, Any]:
            rid, scopes, item = self._current(caller, key, run_id)
            old = item.data["value"] if item is not None else None
            combined, merged = combine(old, value, strategy, key)
            self._encoded(combined)
            now = self.clock.now()
            expires = item.expires_at if item is not None else None
            written = self._write(
                caller,
                rid,
                scopes=scopes,
                key=key,
                run_id=run_id,
                value=combined,
                item=item,
                expires=expires,
                expected_version=expected_version,
                now=now,
            )
            return {"key": key, "version": written.version, "merged_keys": merged}

        return on_conflict(attempt, 1 if expected_version is not None else ATTEMPTS, self.sleep)

    def _write(
        self,
        caller: Caller,
        rid: str,
        *,
        scopes: list[str],
        key: str,
        run_id: str | None,
        value: Any,
        item: Item | None,
        expires: datetime | None,
        expected_version: int | None,
        now: datetime,
    ) -> Item:
        """One version-checked write: at `expected_version` when the caller gave one, else at the version
        just read (0: must not exist; a key that expired is written over at the version the store keeps)."""
        if expected_version is not None and (item.version if item is not None else 0) != expected_version:
            raise Conflict(f"context key {key!r} is not at version {expected_version}", code="version_conflict")
        if item is not None:
            at = item.version
        else:  # new, or expired: the store keeps an expired key's versions, and the next one follows them
            at = max((v.version for v in self.records.history(caller.context_id, KIND, rid)), default=0)
        data = {"key": key, "run_id": run_id, "value": value, "scopes": scopes}
        write = Write(caller.context_id, KIND, rid, data, caller.actor, expected_version=at, expires_at=expires)
        try:
            return self.records.transact([write], now)[0]
        except Conflict as exc:
            raise Conflict(f"context key {key!r} changed meanwhile", code="version_conflict") from exc

    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        """The subject's context keys (every run's), each with every version (`engram.trust.erasure`)."""
        return batched(self.records, ctx, KIND, mine(self.records, ctx, KIND, subject))


def combine(old: Any, value: Any, strategy: Strategy, key: str) -> tuple[Any, list[str]]:
    """The merged value and the keys the merge set (top-level keys of `value`; for append, none)."""
    if strategy == "replace":
        return value, sorted(value) if isinstance(value, dict) else []
    if strategy == "append":  # a list extends the array item by item; any other value is one item
        items = list(value) if isinstance(value, list) else [value]
        if old is None:
            return items, []
        if not isinstance(old, list):
            raise InvalidInput(f"append needs an array at {key!r}; it holds {type(old).__name__}")
        return [*old, *items], []
    base = old if isinstance(old, dict) else {}
    if old is not None and not isinstance(old, dict):
        raise InvalidInput(f"{strategy} needs an object at {key!r}; it holds {type(old).__name__}")
    merged = {**base, **value} if strategy == "merge_shallow" else _deep(base, value)
    return merged, sorted(value)


def _deep(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = dict(old)
    for k, v in new.items():
        out[k] = _deep(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
