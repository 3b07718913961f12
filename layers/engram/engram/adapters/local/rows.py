"""A document of the local index as `Slots` holds it, and how its fields are read into arrays (instants as
microseconds, a kind or metadata value for a filter's mask)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from engram.kernel.ports import MetaValue


@dataclass(slots=True)
class Row:
    id: str
    kind: str
    text: str
    scopes: tuple[str, ...]
    valid_from: datetime | None
    valid_until: datetime | None
    metadata: dict[str, MetaValue]


Mask = np.ndarray[tuple[int], np.dtype[np.bool_]]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(t: datetime | None, none: int) -> int:
    """An instant as whole microseconds since the epoch (exact: what datetimes compare by); `none` for None."""
    if t is None:
        return int(none)
    aware = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    return (aware - _EPOCH) // _MICROSECOND


def field_of(row: Row | None, key: str) -> Any:
    """A row's kind (key "") or metadata value, for `Slots.matching`; a free slot has none."""
    if row is None:
        return _FREE
    return row.kind if key == "" else row.metadata.get(key)


_FREE = object()


def among(value: Any, values: frozenset[Any]) -> bool:
    try:
        return value in values
    except TypeError:  # an unhashable value: compared one by one, as `filters.metadata_matches` does
        return any(value == v for v in values)
