"""SearchIndex on SQLite FTS5 (BM25, porter stemming) plus exact vector search with numpy.

Vectors live in the `docs` table and, per context, in an in-memory matrix kept in step with every
write, so a query is one matrix-vector product (~1 ms per 10k vectors).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from engram.adapters.local.sqlite_records import connect
from engram.clock import iso, parse_time
from engram.ports import Hit, IndexDoc, MetaValue, SearchQuery, Vector
from engram.search_rules import CANDIDATES, merge_hits, query_terms, visible

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
  rowid INTEGER PRIMARY KEY, context_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,
  text TEXT NOT NULL, scopes TEXT NOT NULL, valid_from TEXT, valid_until TEXT, metadata TEXT NOT NULL,
  vector BLOB, UNIQUE (context_id, id));
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(text, content='docs', content_rowid='rowid',
  tokenize='porter unicode61');
"""


@dataclass
class _Row:
    id: str
    kind: str
    text: str
    scopes: list[str]
    valid_from: datetime | None
    valid_until: datetime | None
    metadata: dict[str, MetaValue]


@dataclass
class _Vectors:
    """One context's vectors: row i of `mat` belongs to `rows[i]`."""

    dim: int
    mat: Vector = field(init=False)
    rows: list[_Row] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mat = np.zeros((16, self.dim), dtype=np.float32)

    def put(self, row: _Row, vec: Vector) -> None:
        i = self.pos.get(row.id)
        if i is None:
            i = len(self.rows)
            if i == self.mat.shape[0]:
                self.mat = np.concatenate([self.mat, np.zeros_like(self.mat)])
            self.rows.append(row)
            self.pos[row.id] = i
        else:
            self.rows[i] = row
        self.mat[i] = vec

    def remove(self, id_: str) -> None:
        i = self.pos.pop(id_, None)
        if i is None:
            return
        last = len(self.rows) - 1
        if i != last:  # move the last row into the hole
            self.rows[i] = self.rows[last]
            self.mat[i] = self.mat[last]
            self.pos[self.rows[i].id] = i
        self.rows.pop()


class SqliteSearchIndex:
    def __init__(self, path: Path | str) -> None:
        self._conn = connect(path)
        self._lock = threading.RLock()
        self._conn.executescript(_SCHEMA)
        self._vectors: dict[str, _Vectors] = {}

    # -- writes ---------------------------------------------------------------------------

    def ensure(self) -> None:
        """The tables are made when the index is opened."""

    def upsert(self, docs: Sequence[IndexDoc]) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for d in docs:
                    self._delete_one(d.context_id, d.id)
                    vec = None if d.vector is None else np.asarray(d.vector, dtype=np.float32)
                    cur = self._conn.execute(
                        "INSERT INTO docs (context_id, kind, id, text, scopes, valid_from, valid_until, metadata,"
                        " vector) VALUES (?,?,?,?,?,?,?,?,?)",
                        (
                            d.context_id,
                            d.kind,
                            d.id,
                            d.text,
                            json.dumps(list(d.scopes)),
                            iso(d.valid_from),
                            iso(d.valid_until),
                            json.dumps(dict(d.metadata)),
                            None if vec is None else vec.tobytes(),
                        ),
                    )
                    self._conn.execute("INSERT INTO fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, d.text))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._vectors.clear()  # the in-memory copy may be ahead of the rolled-back table
                raise
            for d in docs:
                cache = self._vectors.get(d.context_id)
                if cache is not None and d.vector is not None:
                    cache.put(self._row_of(d), np.asarray(d.vector, dtype=np.float32))

    @staticmethod
    def _row_of(d: IndexDoc) -> _Row:
        return _Row(d.id, d.kind, d.text, list(d.scopes), d.valid_from, d.valid_until, dict(d.metadata))

    def _delete_one(self, context_id: str, id_: str) -> None:
        row = self._conn.execute(
            "SELECT rowid, text FROM docs WHERE context_id=? AND id=?", (context_id, id_)
        ).fetchone()
        if row is not None:
            self._conn.execute("INSERT INTO fts (fts, rowid, text) VALUES ('delete', ?, ?)", row)
            self._conn.execute("DELETE FROM docs WHERE rowid=?", (row[0],))
        cache = self._vectors.get(context_id)
        if cache is not None:
            cache.remove(id_)

    def delete(self, context_id: str, ids: Sequence[str]) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for id_ in ids:
                    self._delete_one(context_id, id_)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._vectors.pop(context_id, None)
                raise

    def set_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        with self._lock:
            self._conn.execute(
                "UPDATE docs SET valid_until=? WHERE context_id=? AND id=?", (iso(valid_until), context_id, id)
            )
            cache = self._vectors.get(context_id)
            if cache is not None and id in cache.pos:
                cache.rows[cache.pos[id]].valid_until = valid_until

    def count(self, context_id: str) -> int:
        with self._lock:
            (n,) = self._conn.execute("SELECT count(*) FROM docs WHERE context_id=?", (context_id,)).fetchone()
        return int(n)

    # -- reads ----------------------------------------------------------------------------

    @staticmethod
    def _parse(r: Sequence[Any]) -> _Row:
        id_, kind, text, scopes, vf, vu, meta = r
        return _Row(id_, kind, text, json.loads(scopes), parse_time(vf), parse_time(vu), json.loads(meta))

    def _bm25(self, q: SearchQuery, now: datetime, limit: int) -> list[tuple[_Row, float]]:
        terms = query_terms(q.text)
        if not terms:
            return []
        match = (" AND " if q.match_all else " OR ").join('"' + t.replace('"', "") + '"' for t in terms)
        # Rank in FTS5 alone (a join before the sort costs 3x), then read the window's rows and filter them.
        sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?"
        kinds = None if q.kinds is None else set(q.kinds)
        window = max(limit * 3, 64)
        while True:
            out: list[tuple[_Row, float]] = []
            with self._lock:
                ranked = self._conn.execute(sql, (match, window)).fetchall()
                rows = self._rows([r[0] for r in ranked])
            for rowid, score in ranked:
                raw = rows.get(rowid)
                if raw is None or raw[0] != q.context_id or (kinds is not None and raw[2] not in kinds):
                    continue
                row = self._parse(raw[1:])  # only rows that may be returned pay for JSON parsing
                if visible(row.scopes, row.valid_from, row.valid_until, row.metadata, q, now):
                    out.append((row, -float(score)))
                    if len(out) >= limit:
                        return out
            if len(ranked) < window:
                return out
            window *= 4

    def _rows(self, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
        """Raw (context_id, id, kind, text, scopes, valid_from, valid_until, metadata) rows by rowid."""
        out: dict[int, tuple[Any, ...]] = {}
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            for r in self._conn.execute(
                "SELECT rowid, context_id, id, kind, text, scopes, valid_from, valid_until, metadata FROM docs "
                f"WHERE rowid IN ({','.join('?' * len(part))})",
                part,
            ):
                out[r[0]] = tuple(r[1:])
        return out

    def _load(self, context_id: str, dim: int) -> _Vectors:
        cache = self._vectors.get(context_id)
        if cache is None or cache.dim != dim:
            cache = _Vectors(dim)
            rows = self._conn.execute(
                "SELECT id, kind, text, scopes, valid_from, valid_until, metadata, vector FROM docs "
                "WHERE context_id=? AND vector IS NOT NULL",
                (context_id,),
            ).fetchall()
            for r in rows:
                vec = np.frombuffer(r[7], dtype=np.float32)
                if vec.shape[0] == dim:
                    cache.put(self._parse(r[:7]), vec)
            self._vectors[context_id] = cache
        return cache

    def _vector(self, q: SearchQuery, now: datetime, limit: int) -> list[tuple[_Row, float]]:
        if q.vector is None:
            return []
        qv = np.asarray(q.vector, dtype=np.float32)
        with self._lock:
            cache = self._load(q.context_id, qv.shape[0])
            n = len(cache.rows)
            if n == 0:
                return []
            scores = cache.mat[:n] @ qv
            return list(self._take(cache, scores, q, now, limit))

    def _take(
        self, cache: _Vectors, scores: Vector, q: SearchQuery, now: datetime, limit: int
    ) -> Iterator[tuple[_Row, float]]:
        """Best rows first that pass every filter; widens the candidate window until `limit` pass."""
        n, window, start, found = scores.shape[0], max(limit * 4, 64), 0, 0
        order = np.argsort(-scores, kind="stable") if n <= window else None
        while start < n and found < limit:
            if order is None:
                end = min(n, start + window)
                top = np.argpartition(-scores, end - 1)[:end] if end < n else np.arange(n)
                chunk = top[np.argsort(-scores[top], kind="stable")][start:end]
            else:
                end = n
                chunk = order[start:end]
            for i in chunk:
                row = cache.rows[int(i)]
                if q.kinds is not None and row.kind not in q.kinds:
                    continue
                if visible(row.scopes, row.valid_from, row.valid_until, row.metadata, q, now):
                    found += 1
                    yield row, float(scores[i])
                    if found >= limit:
                        return
            start, window = end, window * 4

    def search(self, query: SearchQuery, now: datetime) -> list[Hit]:
        k = max(0, query.k)
        if k == 0:
            return []
        pool = max(CANDIDATES, k) if query.mode == "hybrid" else k
        bm = [_hit(r, s) for r, s in self._bm25(query, now, pool)] if query.mode != "vector" else []
        vec = [_hit(r, s) for r, s in self._vector(query, now, pool)] if query.mode != "bm25" else []
        if query.mode == "hybrid" and query.match_all:  # keyword precision: only what every term matches
            keep = {h.id for h in bm}
            vec = [h for h in vec if h.id in keep]
        if query.mode == "hybrid":
            return merge_hits(bm, vec, query.fusion, k)
        return bm if query.mode == "bm25" else vec


def _hit(row: _Row, score: float) -> Hit:
    return Hit(row.id, row.kind, score, row.text, row.metadata, row.scopes)
