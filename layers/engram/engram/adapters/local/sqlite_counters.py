"""Counters on SQLite (`counters.db`, their own file: a quota check never waits on the records' writers). An
`add` is one IMMEDIATE transaction, so concurrent threads and processes on one data folder never both take
the last unit of a limit."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

from engram.adapters.local.sqlite_records import connect
from engram.kernel.clock import iso

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL,
    expires_at TEXT
) WITHOUT ROWID;
"""
PRUNE_EVERY = 5000


class SqliteCounters:
    def __init__(self, path: Path | str) -> None:
        self._conn = connect(path)
        self._lock = threading.Lock()
        self._conn.executescript(_SCHEMA)
        self._adds = 0

    def add(self, name: str, amount: int, limit: int | None, expires_at: datetime | None, now: datetime) -> int | None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute("SELECT value, expires_at FROM counters WHERE name=?", (name,)).fetchone()
                current = row[0] if row and (row[1] is None or row[1] > (iso(now) or "")) else 0
                if limit is not None and amount > 0 and current + amount > limit:
                    self._conn.execute("ROLLBACK")
                    return None
                value = max(current + amount, 0)
                self._conn.execute(
                    "INSERT OR REPLACE INTO counters VALUES (?, ?, ?)",
                    (name, value, iso(expires_at) if expires_at else None),
                )
                self._adds += 1
                if self._adds % PRUNE_EVERY == 0:
                    self._conn.execute(
                        "DELETE FROM counters WHERE expires_at IS NOT NULL AND expires_at <= ?", (iso(now),)
                    )
                self._conn.execute("COMMIT")
                return value
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def value(self, name: str, now: datetime) -> int:
        with self._lock:
            row = self._conn.execute("SELECT value, expires_at FROM counters WHERE name=?", (name,)).fetchone()
        return int(row[0]) if row and (row[1] is None or row[1] > (iso(now) or "")) else 0
