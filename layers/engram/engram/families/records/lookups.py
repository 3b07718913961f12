"""Lookup keys: how a typed object (a record, a typed document) is found by a field's value without a scan.

Each lookup field of an object's schema, its creation time (`createdAt`: a list by type is a range over it)
and its `externalId` is one index entry: a record of kind `rlookup` (records) or `dlookup` (documents) whose
id is `type ␟ field ␟ value ␟ owner id` (␟ = U+001F, below every character a lookup value may hold, so ids
sort as (value, owner)). Values are kept as `schemas.sortable` text, so exact, prefix and range lookups
are one key range of the store (DynamoDB: a query on the GSI with `BETWEEN`; SQLite: the primary key), in
either order; the page token is the last entry read, and the next page the key range beyond it.

Entries are written in the same transaction as their object (`changes`): created with it, removed (a
`Write.remove`) when its value changes or the object is deleted. A query reads entries, then the owners in
one batched read, and keeps an owner only if it is visible, live, and still holds the value (a lagging
index, as DynamoDB's GSI can be, never shows a stale match).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, Literal

from engram.families.records.schemas import Lookup, LookupOp, Schema, sortable
from engram.kernel.errors import InvalidInput
from engram.kernel.ports import Item, RecordStore, Write

SEP = "\x1f"
END = "\U0010ffff"
CREATED = Lookup("createdAt", ("exact", "range"), "string")
EXTERNAL = Lookup("externalId", ("exact", "prefix"), "string")
BUILT_IN = {lk.field: lk for lk in (CREATED, EXTERNAL)}
MAX_KEY_BYTES = 900  # DynamoDB's sort key holds 1,024 bytes


def _base(type_: str, field: str) -> str:
    return f"{type_}{SEP}{field}{SEP}"


def entries(schema: Schema, payload: dict[str, Any], created_at: str, external_id: str | None, owner: str) -> set[str]:
    """The lookup entry ids of an object with this payload (none for a value the field cannot hold)."""
    out = {f"{_base(schema.type, CREATED.field)}{created_at}{SEP}{owner}"}
    if external_id:
        out.add(f"{_base(schema.type, EXTERNAL.field)}{external_id}{SEP}{owner}")
    for lk in schema.lookups:
        text = sortable(payload.get(lk.field), lk.kind)
        if text is not None:
            out.add(f"{_base(schema.type, lk.field)}{text}{SEP}{owner}")
    return out


def check_value(field: str, value: Any) -> None:
    """A lookup field's string: no control characters (they would sort below the separator), and short
    enough for a store key."""
    if isinstance(value, str) and (any(ord(ch) < 32 for ch in value) or len(value.encode()) > MAX_KEY_BYTES // 2):
        raise InvalidInput(
            f"payload.{field}: a lookup field's text holds no control characters and at most "
            f"{MAX_KEY_BYTES // 2} bytes",
            code="schema_violation",
            details={"path": f"payload.{field}"},
        )


def changes(ctx: str, kind: str, actor: str, old: set[str], new: set[str], owner_kind: str, owner: str) -> list[Write]:
    """The writes that take an object's entries from `old` to `new` (in the object's transaction)."""
    data = {"owner": owner, "kind": owner_kind}
    gone = [Write(ctx, kind, i, {}, actor, expected_version=1, remove=True) for i in sorted(old - new)]
    return gone + [Write(ctx, kind, i, data, actor, expected_version=0) for i in sorted(new - old)]


def _bounds(
    schema: Schema, field: str, op: LookupOp | Literal["list"], value: Any, low: Any, high: Any
) -> tuple[str, str | None, str | None]:
    """(prefix, start, end) of the key range a lookup reads."""
    lk = BUILT_IN.get(field) or schema.lookup(field, "exact" if op == "list" else op)
    if op not in ("list", *lk.ops):
        raise InvalidInput(f"{field!r} takes {', '.join(lk.ops)}, not {op}", code="lookup_not_allowed")
    base = _base(schema.type, lk.field)
    if op == "list":
        return base, None, None

    def text(v: Any, what: str) -> str:
        out = sortable(v, lk.kind)
        if out is None:
            raise InvalidInput(f"{what} must be a {lk.kind} for lookup field {field!r}")
        check_value(field, out)
        return out

    if op == "exact":
        return base + text(value, "value") + SEP, None, None
    if op == "prefix":
        return base + text(value, "value"), None, None
    if low is None and high is None:
        raise InvalidInput("a range lookup takes from, to or both")
    start = base + text(low, "from") if low is not None else None
    end = base + text(high, "to") + SEP + END if high is not None else None
    return base, start, end


Keep = Callable[[Item], bool]


def _token(last: str) -> str:
    return base64.urlsafe_b64encode(last.encode()).decode().rstrip("=")


def _last(token: str, prefix: str) -> str:
    try:
        last = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        last = ""
    if not last.startswith(prefix) or not last:
        raise InvalidInput("pageToken does not continue this lookup", code="invalid_page_token")
    return last


def find(
    records: RecordStore,
    ctx: str,
    kind: str,
    owner_kind: str,
    schema: Schema,
    field: str,
    op: LookupOp | Literal["list"],
    value: Any,
    low: Any,
    high: Any,
    descending: bool,
    limit: int,
    token: str | None,
    keep: Keep,
    current: Callable[[Item], set[str]],
) -> tuple[list[Item], str | None]:
    """Up to `limit` owners whose entries lie in the lookup's key range, in key order, that `keep` accepts
    (visible, live) and whose `current` entries still include the one found; and the page token (the last
    entry read: the next page is the key range beyond it)."""
    prefix, start, end = _bounds(schema, field, op, value, low, high)
    last = _last(token, prefix) if token else None
    found: list[Item] = []
    while True:
        lo, hi = start, end
        if last is not None and not descending:
            lo = max(lo or "", last + "\x00")
        elif last is not None:  # the greatest id below `last`: its last character one lower, then anything
            below = last[:-1] + chr(ord(last[-1]) - 1) + END
            hi = min(hi, below) if hi is not None else below
        page = records.query(ctx, kind, prefix=prefix, start=lo, end=hi, descending=descending, limit=limit + 1)
        entries_ = [e for e in page.items if e.data.get("kind") == owner_kind]
        owners = records.get_many(ctx, owner_kind, [e.data["owner"] for e in entries_])
        for e in entries_:
            owner = owners.get(e.data["owner"])
            if owner is not None and keep(owner) and e.id in current(owner):
                if len(found) == limit:
                    return found, _token(last) if last is not None else None
                found.append(owner)
            last = e.id
        if page.cursor is None or not page.items:
            return found, None
        last = page.items[-1].id
