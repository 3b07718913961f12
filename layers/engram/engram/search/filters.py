"""Every non-text filter of a search, in one place: valid time, scopes, metadata values and ranges. Each
SearchIndex adapter keeps what `visible` keeps (the OpenSearch one as query clauses)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engram.kernel.ports import MetaValue, SearchQuery
from engram.kernel.scopes import matches


def valid_at(valid_from: datetime | None, valid_until: datetime | None, t: datetime) -> bool:
    """Valid-time rule: valid_from <= t < valid_until (open ends where None)."""
    return (valid_from is None or valid_from <= t) and (valid_until is None or t < valid_until)


def metadata_matches(metadata: Mapping[str, MetaValue], wanted: Mapping[str, MetaValue | Sequence[MetaValue]]) -> bool:
    for key, want in wanted.items():
        have = metadata.get(key)
        if isinstance(want, list | tuple):
            if have not in want:
                return False
        elif have != want:
            return False
    return True


def in_ranges(
    metadata: Mapping[str, MetaValue], ranges: Mapping[str, tuple[MetaValue | None, MetaValue | None]]
) -> bool:
    for key, (lo, hi) in ranges.items():
        have = metadata.get(key)
        if have is None:
            return False
        try:
            value: Any = have  # compared as it is; values of different types are out of range (TypeError)
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                return False
        except TypeError:
            return False
    return True


def visible(
    doc_scopes: Sequence[str],
    valid_from: datetime | None,
    valid_until: datetime | None,
    metadata: Mapping[str, MetaValue],
    query: SearchQuery,
    now: datetime,
    seen: dict[tuple[str, ...], bool] | None = None,
) -> bool:
    """Every non-text filter of a SearchQuery, in one place. `seen`: the scope match of each tag set met so far
    in this query (one query's candidates mostly share a few tag sets: issue #26's profile)."""
    if not valid_at(valid_from, valid_until, query.as_of or now):
        return False
    if seen is None:
        scoped = matches(doc_scopes, query.visibility)
    else:
        tags = tuple(doc_scopes)
        if tags not in seen:
            seen[tags] = matches(tags, query.visibility)
        scoped = seen[tags]
    return scoped and metadata_matches(metadata, query.metadata) and in_ranges(metadata, query.ranges)
