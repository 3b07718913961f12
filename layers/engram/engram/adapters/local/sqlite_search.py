"""SearchIndex on SQLite (the documents, durable) with the ranking done in memory, per context.

The first search in a context loads its documents into a `_Context`: an inverted index for BM25 (the
rules of `engram.search_rules`: Snowball stems, k1 1.5, b 0.75, Lucene's idf) and a vector matrix for
exact cosine search. Every write updates SQLite and, when loaded, the context's copy, so a query is a
few numpy operations over that context alone (well under a millisecond per 10k documents), whatever the
other contexts hold.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from engram.adapters.local.sqlite_records import connect, expunge
from engram.clock import iso, parse_time
from engram.ports import Closing, Hit, IndexDoc, MetaValue, SearchQuery, Vector
from engram.search_rules import search as run_search
from engram.search_rules import visible
from engram.terms import BM25_B, BM25_K1, bm25_idf, index_terms

_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
  rowid INTEGER PRIMARY KEY, context_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,
  text TEXT NOT NULL, scopes TEXT NOT NULL, valid_from TEXT, valid_until TEXT, metadata TEXT NOT NULL,
  vector BLOB, UNIQUE (context_id, id));
CREATE TABLE IF NOT EXISTS changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, context_id TEXT NOT NULL, id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS changes_by_context ON changes (context_id, seq);
"""
KEEP_CHANGES = 100_000  # change rows kept; a copy further behind than that loads its context again
_COLUMNS = "id, kind, text, scopes, valid_from, valid_until, metadata, vector"


@dataclass
class _Row:
    id: str
    kind: str
    text: str
    scopes: list[str]
    valid_from: datetime | None
    valid_until: datetime | None
    metadata: dict[str, MetaValue]


Mask = np.ndarray[tuple[int], np.dtype[np.bool_]]


@dataclass
class _Context:
    """One context's documents in memory: slot i holds `rows[i]` (None when free), its vector (if any),
    its length in terms; `postings[term]` maps slots to term frequencies."""

    rows: list[_Row | None] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)
    terms: list[list[str]] = field(default_factory=list)
    lengths: Vector = field(default_factory=lambda: np.zeros(16, dtype=np.float32))
    mat: Vector | None = None
    has_vec: Vector = field(default_factory=lambda: np.zeros(16, dtype=bool))
    postings: dict[str, dict[int, int]] = field(default_factory=dict)
    arrays: dict[str, tuple[Vector, Vector]] = field(default_factory=dict)
    total_length: float = 0.0
    seq: int = 0  # the last change (table `changes`) this copy includes
    # slot masks of the kind and metadata filters queries use (`matching`), until the next write
    masks: dict[tuple[str, frozenset[Any]], Mask] = field(default_factory=dict)

    @property
    def live(self) -> int:
        return len(self.pos)

    def _grow(self) -> None:
        cap = self.lengths.shape[0] * 2
        self.lengths = np.concatenate([self.lengths, np.zeros(cap // 2, dtype=np.float32)])
        self.has_vec = np.concatenate([self.has_vec, np.zeros(cap // 2, dtype=bool)])
        if self.mat is not None:
            self.mat = np.concatenate([self.mat, np.zeros_like(self.mat)])

    def put(self, row: _Row, vec: Vector | None) -> None:
        self.masks.clear()
        i = self.pos.get(row.id)
        old = self.rows[i] if i is not None else None
        if i is not None and old is not None and old.text == row.text:  # same text (vectors added): keep terms
            self.rows[i] = row
            self._set_vector(i, vec)
            return
        self.remove(row.id)
        if self.free:
            i = self.free.pop()
        else:
            i = len(self.rows)
            if i == self.lengths.shape[0]:
                self._grow()
            self.rows.append(None)
            self.terms.append([])
        terms = index_terms(row.text)
        self.rows[i], self.terms[i], self.pos[row.id] = row, terms, i
        self.lengths[i] = len(terms)
        self.total_length += len(terms)
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        for t, n in counts.items():
            self.postings.setdefault(t, {})[i] = n
            self.arrays.pop(t, None)
        self._set_vector(i, vec)

    def _set_vector(self, i: int, vec: Vector | None) -> None:
        self.has_vec[i] = False
        if vec is not None:
            if self.mat is None:
                self.mat = np.zeros((self.lengths.shape[0], vec.shape[0]), dtype=np.float32)
            if vec.shape[0] == self.mat.shape[1]:
                self.mat[i] = vec
                self.has_vec[i] = True

    def remove(self, id_: str) -> None:
        self.masks.clear()
        i = self.pos.pop(id_, None)
        if i is None:
            return
        for t in set(self.terms[i]):
            posting = self.postings.get(t)
            if posting is not None:
                posting.pop(i, None)
                if not posting:
                    del self.postings[t]
            self.arrays.pop(t, None)
        self.total_length -= float(self.lengths[i])
        self.rows[i], self.terms[i] = None, []
        self.lengths[i] = 0
        self.has_vec[i] = False
        self.free.append(i)

    def _posting(self, term: str) -> tuple[Vector, Vector]:
        found = self.arrays.get(term)
        if found is None:
            posting = self.postings.get(term, {})
            found = (
                np.fromiter(posting.keys(), dtype=np.int64, count=len(posting)),
                np.fromiter(posting.values(), dtype=np.float32, count=len(posting)),
            )
            self.arrays[term] = found
        return found

    def bm25(self, terms: Mapping[str, float], match_all: bool) -> Vector:
        """A score per slot (each term's BM25 times its weight); -inf where the document matches no term
        (or not every one, with match_all)."""
        cap = len(self.rows)
        scores = np.zeros(cap, dtype=np.float32)
        matched = np.zeros(cap, dtype=np.int32)
        n = self.live
        if n == 0 or not terms:
            return np.full(cap, -np.inf, dtype=np.float32)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths[:cap] / (self.total_length / n or 1.0))
        for t, weight in terms.items():
            slots, tfs = self._posting(t)
            if slots.shape[0] == 0:
                continue
            idf = weight * bm25_idf(n, slots.shape[0])
            scores[slots] += idf * tfs * (BM25_K1 + 1) / (tfs + norm[slots])
            matched[slots] += 1
        need = len(terms) if match_all else 1
        return np.where(matched >= need, scores, -np.inf).astype(np.float32)

    def matching(self, q: SearchQuery) -> Mask | None:
        """Which slots a query's kind and metadata-equality filters keep (None: no such filter), so ranking
        skips the rest at once instead of walking past them (a thread's messages among many threads). Kept
        per filter until the next write."""
        if q.kinds is None and not q.metadata:
            return None
        cap = len(self.rows)
        keep = np.ones(cap, dtype=bool)
        wanted: list[tuple[str, frozenset[Any]]] = []
        if q.kinds is not None:
            wanted.append(("", frozenset(q.kinds)))
        for key, want in q.metadata.items():
            wanted.append((key, frozenset(want) if isinstance(want, list | tuple) else frozenset([want])))
        for key, values in wanted:
            mask = self.masks.get((key, values))
            if mask is None or mask.shape[0] != cap:
                if len(self.masks) > 64:
                    self.masks.clear()
                mask = np.fromiter((_among(_field(r, key), values) for r in self.rows), dtype=np.bool_, count=cap)
                self.masks[(key, values)] = mask
            keep &= mask
        return keep

    def cosine(self, qv: Vector) -> Vector:
        cap = len(self.rows)
        if self.mat is None or qv.shape[0] != self.mat.shape[1]:
            return np.full(cap, -np.inf, dtype=np.float32)
        scores = self.mat[:cap] @ qv
        return np.where(self.has_vec[:cap], scores, -np.inf).astype(np.float32)


class SqliteSearchIndex:
    """Many processes may share the file (`engram serve`, `engram stdio`, the CLI): every write also
    appends to `changes` in its transaction, and a process whose in-memory copy of a context is behind
    (another connection committed: `PRAGMA data_version` moved) applies the changed rows before it reads.
    `generation(context)` is the context's last change: what a cache of search results is keyed by."""

    def __init__(self, path: Path | str) -> None:
        self._conn = connect(path)
        self._lock = threading.RLock()
        self._conn.executescript(_SCHEMA)
        self._contexts: dict[str, _Context] = {}
        self._data_version = self._pragma_data_version()
        self._stale: set[str] = set()
        self._writes = 0

    # -- writes ---------------------------------------------------------------------------

    def expunge(self) -> None:
        with self._lock:
            expunge(self._conn)

    def ensure(self) -> None:
        """The tables are made when the index is opened."""

    def _pragma_data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _changed(self, context_id: str, ids: Sequence[str]) -> None:
        """Log changes (inside the caller's transaction); now and then, forget the oldest."""
        self._conn.executemany("INSERT INTO changes (context_id, id) VALUES (?, ?)", [(context_id, i) for i in ids])
        self._writes += 1
        if self._writes % 1000 == 0:
            self._conn.execute("DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - ?", (KEEP_CHANGES,))

    def _write(self, work: Callable[[], None]) -> None:
        """One write transaction. The in-memory copies follow only after it commits: a rollback leaves
        them as they were, and a context that was behind before is brought up to date first."""
        with self._lock:
            self._refresh_marks()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                work()
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._contexts.clear()  # the in-memory copies may be ahead of the rolled-back table
                raise

    def upsert(self, docs: Sequence[IndexDoc], closing: Sequence[Closing] = ()) -> None:
        def work() -> None:
            for d in docs:
                self._conn.execute("DELETE FROM docs WHERE context_id=? AND id=?", (d.context_id, d.id))
                vec = None if d.vector is None else np.asarray(d.vector, dtype=np.float32)
                self._conn.execute(
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
            for context_id, id_, until in closing:
                self._conn.execute(
                    "UPDATE docs SET valid_until=? WHERE context_id=? AND id=?", (iso(until), context_id, id_)
                )
            by_context: dict[str, list[str]] = {}
            for d in docs:
                by_context.setdefault(d.context_id, []).append(d.id)
            for context_id, id_, _ in closing:
                by_context.setdefault(context_id, []).append(id_)
            for context_id, ids in by_context.items():
                self._changed(context_id, ids)

        self._write(work)
        for d in docs:
            cache = self._contexts.get(d.context_id)
            if cache is not None:
                cache.put(self._row_of(d), None if d.vector is None else np.asarray(d.vector, dtype=np.float32))
        for context_id, id_, until in closing:
            self._set_cached_validity(context_id, id_, until)

    @staticmethod
    def _row_of(d: IndexDoc) -> _Row:
        return _Row(d.id, d.kind, d.text, list(d.scopes), d.valid_from, d.valid_until, dict(d.metadata))

    def delete(self, context_id: str, ids: Sequence[str]) -> None:
        def work() -> None:
            for id_ in ids:
                self._conn.execute("DELETE FROM docs WHERE context_id=? AND id=?", (context_id, id_))
            self._changed(context_id, ids)

        self._write(work)
        cache = self._contexts.get(context_id)
        if cache is not None:
            for id_ in ids:
                cache.remove(id_)

    def set_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        def work() -> None:
            self._conn.execute(
                "UPDATE docs SET valid_until=? WHERE context_id=? AND id=?", (iso(valid_until), context_id, id)
            )
            self._changed(context_id, [id])

        self._write(work)
        self._set_cached_validity(context_id, id, valid_until)

    def _set_cached_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        with self._lock:
            cache = self._contexts.get(context_id)
            if cache is not None and id in cache.pos:
                row = cache.rows[cache.pos[id]]
                if row is not None:
                    row.valid_until = valid_until

    def count(self, context_id: str) -> int:
        with self._lock:
            return self._context(context_id).live

    def generation(self, context_id: str) -> int | None:
        with self._lock:
            row = self._conn.execute("SELECT max(seq) FROM changes WHERE context_id=?", (context_id,)).fetchone()
        return int(row[0] or 0)

    # -- reads ----------------------------------------------------------------------------

    @staticmethod
    def _parse(r: Sequence[Any]) -> _Row:
        id_, kind, text, scopes, vf, vu, meta = r
        return _Row(id_, kind, text, json.loads(scopes), parse_time(vf), parse_time(vu), json.loads(meta))

    def _refresh_marks(self) -> None:
        """Every loaded context may be behind when another connection committed. Call with the lock held."""
        version = self._pragma_data_version()
        if version != self._data_version:
            self._data_version = version
            self._stale |= set(self._contexts)

    def _last_seq(self, context_id: str) -> int:
        row = self._conn.execute("SELECT max(seq) FROM changes WHERE context_id=?", (context_id,)).fetchone()
        return int(row[0] or 0)

    def _load(self, context_id: str) -> _Context:
        cache = _Context()
        cache.seq = self._last_seq(context_id)
        for r in self._conn.execute(f"SELECT {_COLUMNS} FROM docs WHERE context_id=?", (context_id,)):
            cache.put(self._parse(r[:7]), None if r[7] is None else np.frombuffer(r[7], dtype=np.float32))
        return cache

    def _catch_up(self, context_id: str, cache: _Context) -> _Context:
        """Apply the rows other processes changed since the copy's last change."""
        first = self._conn.execute("SELECT min(seq) FROM changes").fetchone()[0]
        if first is not None and cache.seq < int(first) - 1:
            return self._load(context_id)  # further behind than the log goes
        changed = self._conn.execute(
            "SELECT seq, id FROM changes WHERE context_id=? AND seq>? ORDER BY seq", (context_id, cache.seq)
        ).fetchall()
        for id_ in dict.fromkeys(i for _, i in changed):
            row = self._conn.execute(f"SELECT {_COLUMNS} FROM docs WHERE context_id=? AND id=?", (context_id, id_))
            found = row.fetchone()
            if found is None:
                cache.remove(id_)
            else:
                cache.put(self._parse(found[:7]), None if found[7] is None else np.frombuffer(found[7], np.float32))
        if changed:
            cache.seq = int(changed[-1][0])
        return cache

    def _context(self, context_id: str) -> _Context:
        """The context's documents in memory, loaded from SQLite on first use and brought up to date with
        other processes' writes. Call with the lock held."""
        self._refresh_marks()
        cache = self._contexts.get(context_id)
        if cache is None:
            cache = self._contexts[context_id] = self._load(context_id)
        elif context_id in self._stale:
            cache = self._contexts[context_id] = self._catch_up(context_id, cache)
        self._stale.discard(context_id)
        return cache

    def _bm25(self, q: SearchQuery, now: datetime, weights: Mapping[str, float], limit: int) -> list[Hit]:
        with self._lock:
            cache = self._context(q.context_id)
            return [_hit(r, s) for r, s in self._take(cache, cache.bm25(weights, q.match_all), q, now, limit)]

    def _vector(self, q: SearchQuery, now: datetime, vector: Vector, limit: int) -> list[Hit]:
        qv = np.asarray(vector, dtype=np.float32)
        with self._lock:
            cache = self._context(q.context_id)
            return [_hit(r, s) for r, s in self._take(cache, cache.cosine(qv), q, now, limit)]

    def vectors(self, context_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        with self._lock:
            cache = self._context(context_id)
            if cache.mat is None:
                return {}
            found = [(i, s) for i in ids if (s := cache.pos.get(i)) is not None and cache.has_vec[s]]
            if not found:
                return {}
            rows = cache.mat[np.fromiter((s for _, s in found), dtype=np.int64, count=len(found))]  # one copy
            return {i: rows[n] for n, (i, _) in enumerate(found)}

    def term_counts(self, context_id: str, stems: Sequence[str]) -> tuple[int, Mapping[str, int]]:
        with self._lock:
            cache = self._context(context_id)
            return cache.live, {t: len(cache.postings.get(t, ())) for t in stems}

    def terms_in(self, context_id: str, ids: Sequence[str], stems: Sequence[str]) -> dict[str, set[str]]:
        """The stems of `stems` each indexed document holds, from the postings (no text tokenised again)."""
        with self._lock:
            cache = self._context(context_id)
            postings = [(t, cache.postings.get(t, {})) for t in stems]
            return {i: {t for t, p in postings if slot in p} for i in ids if (slot := cache.pos.get(i)) is not None}

    def _take(
        self, cache: _Context, scores: Vector, q: SearchQuery, now: datetime, limit: int
    ) -> Iterator[tuple[_Row, float]]:
        """Best rows first that pass every filter; widens the candidate window until `limit` pass."""
        keep = cache.matching(q)
        if keep is not None:
            scores = np.where(keep, scores, -np.inf).astype(np.float32)
        n, window, start, found = scores.shape[0], max(limit * 4, 64), 0, 0
        seen: dict[tuple[str, ...], bool] = {}
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
                score = float(scores[i])
                if score == -np.inf:
                    return  # the rest match nothing
                row = cache.rows[int(i)]
                if row is None or (q.kinds is not None and row.kind not in q.kinds):
                    continue
                if visible(row.scopes, row.valid_from, row.valid_until, row.metadata, q, now, seen):
                    found += 1
                    yield row, score
                    if found >= limit:
                        return
            start, window = end, window * 4

    def search(self, query: SearchQuery, now: datetime) -> list[Hit]:
        return run_search(
            query,
            lambda weights, n: self._bm25(query, now, weights, n),
            lambda vector, n: self._vector(query, now, vector, n),
            lambda ids: self.vectors(query.context_id, ids),
            self.term_counts,
            terms_in=lambda ids, stems: self.terms_in(query.context_id, ids, stems),
        )


def _field(row: _Row | None, key: str) -> Any:
    """A row's kind (key "") or metadata value, for `_Context.matching`; a free slot has none."""
    if row is None:
        return _FREE
    return row.kind if key == "" else row.metadata.get(key)


_FREE = object()


def _among(value: Any, values: frozenset[Any]) -> bool:
    try:
        return value in values
    except TypeError:  # an unhashable value: compared one by one, as `search_rules.metadata_matches` does
        return any(value == v for v in values)


def _hit(row: _Row, score: float) -> Hit:
    return Hit(row.id, row.kind, score, row.text, row.metadata, row.scopes)
