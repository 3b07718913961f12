"""Time and identifiers. `Clock` is a port so tests can pin time; ids sort by creation time."""

from __future__ import annotations

import os
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


def parse_time(value: str | datetime | None) -> datetime | None:
    """ISO 8601 (date or date-time, `Z` allowed) to aware UTC; naive values are taken as UTC."""
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
            from engram.errors import InvalidInput

            raise InvalidInput(f"not an ISO 8601 time: {value!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(UTC).isoformat().replace("+00:00", "Z")
