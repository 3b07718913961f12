"""AuditLog on SQLite (`audit.db`, its own file: an append never waits on the records' writers), with each
context's high-water mark in another file beside it (`audit-mark.db`, attached): removing the log's rows, or the
whole log file, leaves the mark that names its last entry.

An append is one IMMEDIATE transaction — read the context's last entry, write the next one chained to it, move
the mark to it — so appends from many threads and processes on one data folder take consecutive sequence
numbers. Entries past their retention are deleted now and then by an append."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from engram.adapters.local.sqlite_records import connect
from engram.kernel.clock import iso, parse_time
from engram.kernel.ports import AuditEntry, AuditMark, Sealer

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    context_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at TEXT NOT NULL,
    data TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL,
    expires_at TEXT,
    PRIMARY KEY (context_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS audit_expiry ON audit (expires_at);
CREATE TABLE IF NOT EXISTS mark.marks (
    context_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    expires_at TEXT,
    mac TEXT NOT NULL
) WITHOUT ROWID;
"""
# Appends of this process between two sweeps of expired entries. A sweep reads the expired entries by their
# expiry (`audit_expiry`), not the whole log: every call appends one, so a year's retention is millions of
# rows (at 20,781 a scan took 5 ms, the index 0.01 ms; an append pays one more index entry).
PRUNE_EVERY = 1000
SWEEP = "DELETE FROM audit WHERE expires_at IS NOT NULL AND expires_at < ?"
MARK = "INSERT OR REPLACE INTO mark.marks VALUES (?, ?, ?, ?, ?)"


def mark_path(path: Path | str) -> Path:
    """Where the marks of the log at `path` are kept: `audit.db` -> `audit-mark.db`."""
    log = Path(path)
    return log.with_name(f"{log.stem}-mark{log.suffix}")


class SqliteAuditLog:
    def __init__(self, path: Path | str) -> None:
        self._conn = connect(path)
        self._conn.execute("ATTACH DATABASE ? AS mark", (str(mark_path(path)),))
        self._conn.execute("PRAGMA mark.journal_mode=WAL")
        self._conn.execute("PRAGMA mark.synchronous=NORMAL")  # as the log itself (a schema's own setting)
        self._conn.execute("PRAGMA mark.secure_delete=ON")
        self._lock = threading.Lock()
        self._conn.executescript(_SCHEMA)
        self._appends = 0

    def append(
        self, context_id: str, data: dict[str, Any], now: datetime, expires_at: datetime | None, sealer: Sealer
    ) -> AuditEntry:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute(
                    "SELECT seq, hash, expires_at FROM audit WHERE context_id=? ORDER BY seq DESC LIMIT 1",
                    (context_id,),
                ).fetchone()
                seq, prev, prev_expires = (row[0] + 1, row[1], parse_time(row[2])) if row else (1, "", None)
                if row is None:  # every entry expired and swept (or none yet): the mark goes on from its own
                    mark = self._conn.execute(
                        "SELECT seq, hash, expires_at FROM mark.marks WHERE context_id=?", (context_id,)
                    ).fetchone()
                    if mark is not None:
                        seq, prev, prev_expires = mark[0] + 1, mark[1], parse_time(mark[2])
                stored, digest = sealer.entry(context_id, seq, now, data, prev, prev_expires)
                expires = iso(expires_at) if expires_at else None
                self._conn.execute(
                    "INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (context_id, seq, iso(now), json.dumps(stored), prev, digest, expires),
                )
                self._conn.execute(
                    MARK, (context_id, seq, digest, expires, sealer.mark(context_id, seq, digest, expires_at))
                )
                self._appends += 1
                if self._appends % PRUNE_EVERY == 0:
                    self._conn.execute(SWEEP, (iso(now),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return AuditEntry(context_id, seq, now, stored, prev, digest)

    def prime(self, context_id: str) -> None:
        """Nothing to start: the append reads the head inside its own transaction, in process."""

    def mark(self, context_id: str) -> AuditMark | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT seq, hash, expires_at, mac FROM mark.marks WHERE context_id=?", (context_id,)
            ).fetchone()
        return None if row is None else AuditMark(context_id, row[0], row[1], parse_time(row[2]), row[3])

    def entries(
        self,
        context_id: str,
        after: int = 0,
        before: int | None = None,
        limit: int = 1000,
        descending: bool = False,
        now: datetime | None = None,
    ) -> list[AuditEntry]:
        order = "DESC" if descending else "ASC"
        with self._lock:
            rows = self._conn.execute(
                f"SELECT seq, at, data, prev, hash, expires_at FROM audit WHERE context_id=? AND seq > ? AND seq < ? "
                f"ORDER BY seq {order} LIMIT ?",
                (context_id, after, before if before is not None else 2**62, limit),
            ).fetchall()
        out = []
        for seq, at, data, prev, digest, expires in rows:
            if now is not None and expires is not None and (t := parse_time(expires)) is not None and t <= now:
                continue
            when = parse_time(at)
            assert when is not None
            out.append(AuditEntry(context_id, seq, when, json.loads(data), prev, digest))
        return out
