"""Every latest item of a kind in a context, page by page, expired ones too: what erasure, export and reindexing
walk (an expired item is hidden from reads but still stored until a TTL sweep)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from engram.kernel.ports import Item, RecordStore

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def every(records: RecordStore, context_id: str, kind: str) -> Iterator[Item]:
    """Every latest item of a kind, expired ones too (an expired item is hidden from reads, but its content is
    still stored until a TTL sweep: an erasure takes it as well)."""
    cursor: str | None = None
    while True:
        page = records.query(context_id, kind, limit=1000, cursor=cursor, now=EPOCH)
        yield from page.items
        if page.cursor is None:
            return
        cursor = page.cursor
