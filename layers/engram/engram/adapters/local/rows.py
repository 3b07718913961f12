"""A document of the local index as `Slots` holds it, and how its fields are read into arrays (instants as
microseconds, a kind or metadata value for a filter's mask)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from engram.kernel.ports import MetaValue, Vector


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


# The metadata keys whose values `Slots.facets` keeps for the rows in memory (each value's slots): a filter on them
# by strings (what a recall that names people narrows by) makes its mask from the slots that hold them, not by
# reading every row; the segment's rows are read through SQLite's indexes on the same keys (`saving.INDEXED`)
FACETED = ("speaker", "session_id")


def faceted(facets: dict[str, dict[str, set[int]]], i: int, row: Row | None, add: bool) -> None:
    """Slot `i`, holding `row`, into `facets` (or out of them): each faceted key's string value."""
    meta = row.metadata if row is not None else {}
    for key in FACETED:
        if isinstance(value := meta.get(key), str):
            if add:
                facets.setdefault(key, {}).setdefault(value, set()).add(i)
            elif (slots := facets.get(key, {}).get(value)) is not None:
                slots.discard(i)


def facet_slots(
    facets: dict[str, dict[str, set[int]]], key: str, values: frozenset[Any]
) -> np.ndarray[tuple[int], np.dtype[np.int64]] | None:
    """The slots in memory (ascending) whose `key` is one of `values` (None: not a faceted key, or a value not a
    string: then every row is read)."""
    if key not in FACETED or not all(isinstance(v, str) for v in values):
        return None
    held = facets.get(key, {})
    return np.fromiter(sorted(s for v in values for s in held.get(v, ())), dtype=np.int64)


def facet_mask(facets: dict[str, dict[str, set[int]]], key: str, values: frozenset[Any], cap: int) -> Mask | None:
    """`facet_slots` as a mask of `cap` slots."""
    slots = facet_slots(facets, key, values)
    if slots is None:
        return None
    mask = np.zeros(cap, dtype=bool)
    mask[slots] = True
    return mask


Runs = Callable[[frozenset[str]], list[tuple[int, int]]]  # the slot ranges of the pages of some kinds


def kinds_mask(runs: Runs, kinds: frozenset[Any], tags: Vector, cap: int) -> Mask:
    """The live slots (a tag) of the pages of `kinds`, from their slot ranges (`runs`; a page holds rows of one
    kind): no row read (reading each row's kind after every write cost a recall ~8 ms at 14,000 rows; #54)."""
    mask = np.zeros(cap, dtype=bool)
    for start, end in runs(frozenset(k for k in kinds if isinstance(k, str))):
        mask[start:end] = True
    mask &= tags[:cap] >= 0
    return mask
