"""Time and identifiers. `Clock` is a port so tests can pin time; ids sort by creation time."""

from __future__ import annotations

import os
import re
import time
from datetime import UTC, datetime
from typing import Protocol

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime) -> None:
        self.current = start

    def now(self) -> datetime:
        return self.current


def new_id(prefix: str) -> str:
    """A ULID-shaped id (48-bit ms time + 80 random bits, Crockford base32), lexically time-ordered."""
    value = (int(time.time() * 1000) << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return f"{prefix}:{''.join(reversed(chars))}"


EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def parse_time(value: str | datetime | None) -> datetime | None:
    """ISO 8601 (date or date-time, `Z` allowed) to aware UTC; naive values are taken as UTC. Raises
    InvalidInput for anything else, a time UTC cannot hold included (year 1 at +05:00)."""
    from engram.kernel.errors import InvalidInput

    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value
    else:
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError as exc:
            raise InvalidInput(f"not an ISO 8601 time: {value!r}"[:120]) from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInput("a time outside the years 1970 to 9999 (UTC)") from None


def bounded_time(value: str | datetime) -> datetime:
    """A caller's time, as every operation takes one (`engram.kernel.operation.Stamp` / `When`): ISO 8601, aware UTC
    (naive: UTC), between 1970-01-01 and 9999-12-31 UTC — what every store holds and every sum of a time and a
    window stays inside. Raises InvalidInput naming the bounds."""
    from engram.kernel.errors import InvalidInput

    dt = parse_time(value)
    assert dt is not None
    if not EARLIEST <= dt <= LATEST:
        raise InvalidInput("a time outside the years 1970 to 9999 (UTC)")
    return dt


def iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


_GENERATED = re.compile(r"^[a-z]{1,8}[:_]([0-9a-hjkmnp-tv-z]{26})(?:#v\d{1,9}\.[0-9a-z.]{0,40})?$")


def is_generated_id(value: str) -> bool:
    """Whether `value` is an id `new_id` made (with its family's prefix, or a chunk's suffix): opaque, carrying
    nothing a person wrote — its letters Crockford base32 and its first ten a time between 2020 and now. Any
    other id (an entity's `Person:alice`, a context key, a path) may hold a name."""
    found = _GENERATED.match(value)
    if found is None:
        return False
    ms = 0
    for char in found.group(1)[:10]:
        ms = ms * 32 + _CROCKFORD.index(char)
    return 1_577_836_800_000 <= ms <= (time.time() + 86_400) * 1000
