"""A context's copy (`Slots`) to and from a segment (`engram.adapters.local.segment`, issue #54)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from engram.adapters.local import ann
from engram.adapters.local.rows import FACETED, Row
from engram.adapters.local.segment import Array, Parts, Segment
from engram.adapters.local.slots import Slots
from engram.kernel.clock import parse_time
from engram.kernel.ports import IndexDoc, Vector

# The SQLite file of the local index (`SqliteSearchIndex`): its documents, the change log copies catch up
# from, and the token its segments carry
SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
  rowid INTEGER PRIMARY KEY, context_id TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,
  text TEXT NOT NULL, scopes TEXT NOT NULL, valid_from TEXT, valid_until TEXT, metadata TEXT NOT NULL,
  vector BLOB, UNIQUE (context_id, id));
CREATE TABLE IF NOT EXISTS changes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, context_id TEXT NOT NULL, id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS changes_by_context ON changes (context_id, seq);
CREATE TABLE IF NOT EXISTS identity (one INTEGER PRIMARY KEY CHECK (one = 1), token TEXT NOT NULL);
INSERT OR IGNORE INTO identity VALUES (1, lower(hex(randomblob(16))));
"""
COLUMNS = "id, kind, text, scopes, valid_from, valid_until, metadata, vector"
# The metadata keys SQLite indexes (`rows.FACETED`, by an index on each one's expression): a filter on one of them by
# strings reads only the rows that hold those values, not every row's metadata (what a recall that names people uses)
INDEXED = {key: f"json_extract(metadata, '$.{key}')" for key in FACETED}
SCHEMA += "".join(f"CREATE INDEX IF NOT EXISTS docs_{k} ON docs (context_id, {x});\n" for k, x in INDEXED.items())


SEGMENT_MIN = 50_000  # a context this large is saved as a segment (`engram.adapters.local.segment`) and opened from it
SEGMENT_TERMS = 500_000  # or one whose texts hold this many terms (~5k chunks of 256 tokens, ~40k memories): loaded
# from its rows, every text is tokenised again (10k chunks: 1.1 s before the first search)


def large(cache: Slots) -> bool:
    """Whether a context is saved as a segment (and opened from it): by its documents or by their terms — or by its
    graph (`ann`, from `ann.MIN_VECTORS` documents): a context below `SEGMENT_MIN` built its graph again at every
    start, in every worker of `engram serve --workers`, searching exactly until it was done."""
    return cache.live >= SEGMENT_MIN or cache.total_length >= SEGMENT_TERMS or cache.graph is not None


def opened(seg: Segment) -> Slots:
    """A copy whose slots start as the segment's (the changes logged after it are applied by the caller)."""
    s = Slots()
    n = seg.n
    s.reserve(n)
    for mine, theirs in ((s.lengths, seg.lengths), (s.tags, seg.tags), (s.has_vec, seg.has_vec)):
        mine[:n] = theirs
    s.valid_from[:n], s.valid_until[:n] = seg.valid_from, seg.valid_until
    s.rows, s.terms = [None] * n, [()] * n
    s.pos = {id_: i for i, id_ in enumerate(seg.ids) if id_}
    s.pages, s.tag_sets = list(seg.pages), list(seg.tag_sets)
    s.tag_ids = {tags: i for i, tags in enumerate(s.tag_sets)}
    s.total_length, s.seq, s.base = seg.total_length, seg.seq, seg
    if seg.vectors is not None:
        s.mat = np.zeros((s.lengths.shape[0], seg.vectors.shape[1]), dtype=np.float32)
    if seg.graph is not None and seg.graph_slots is not None and seg.graph_keys is not None:
        slots, twins = np.asarray(seg.graph_slots, dtype=np.int64), seg.graph_twins
        s.graph = ann.Graph(seg.graph, slots, np.asarray(seg.graph_keys, dtype=np.uint64), twins)
        seen = slots if twins is None else np.concatenate([slots, twins[1]])
        known = np.zeros(n, dtype=bool)  # a slot with a vector and no current node in the graph is scored exactly
        known[seen[(seen >= 0) & (seen < n)]] = True
        s.fresh = set(np.flatnonzero(s.has_vec[:n] & ~known).tolist())
    return s


def parts_of(self: Slots, seq: int) -> Parts:
    """What a segment of this copy is written from (call with the copy's lock held: copies, and the postings as
    triplets; the vectors are read afterwards — a slot changed meanwhile has a change after `seq`, so whoever
    opens the segment applies it again)."""
    n, base, base_n = len(self.rows), self.base, self.base_n
    ids = [r.id if (r := self.rows[i]) is not None else "" for i in range(n)]
    if base is not None:
        live = self.tags[:base_n] >= 0
        ids[:base_n] = [id_ if ok else "" for id_, ok in zip(base.ids, live.tolist(), strict=True)]
    terms: list[str] = list(base.vocab) if base is not None else []
    index: dict[str, int] = dict(base.vocab) if base is not None else {}
    term_of: list[Array] = []
    slot_of: list[Array] = []
    tf_of: list[Array] = []
    if base is not None:
        spans = np.diff(np.asarray(base.offsets))
        every = np.repeat(np.arange(spans.shape[0], dtype=np.int32), spans)
        slots = np.asarray(base.post_slots)
        alive = self.tags[slots] >= 0
        term_of.append(every[alive])
        slot_of.append(slots[alive].astype(np.int32))
        tf_of.append(np.asarray(base.post_tfs)[alive])
    for term, posting in self.postings.items():
        k = index.get(term)
        if k is None:
            k = index[term] = len(terms)
            terms.append(term)
        term_of.append(np.full(len(posting), k, dtype=np.int32))
        slot_of.append(np.fromiter(posting.keys(), dtype=np.int32, count=len(posting)))
        tf_of.append(np.fromiter(posting.values(), dtype=np.float32, count=len(posting)))
    mat, vectors = self.mat, None if base is None else base.vectors

    def read(start: int, end: int) -> Vector:
        assert mat is not None
        out = np.array(mat[start:end], dtype=np.float32)
        if vectors is not None and base is not None and start < base_n:
            last = min(end, base_n)
            out[: last - start] = vectors[start:last]
            base.drop(start, last)
        return out

    graph = self.graph
    serialized, graph_slots, keys, twins = graph.copy() if graph is not None else (None, None, None, None)
    changed = self.fresh | self.in_flight | (self.next_fresh or set())
    return Parts(
        seq=seq,
        n=n,
        ids=ids,
        lengths=self.lengths[:n].copy(),
        tags=self.tags[:n].copy(),
        valid_from=self.valid_from[:n].copy(),
        valid_until=self.valid_until[:n].copy(),
        has_vec=self.has_vec[:n].copy(),
        pages=list(self.pages),
        tag_sets=list(self.tag_sets),
        total_length=self.total_length,
        terms=terms,
        term_of=np.concatenate(term_of) if term_of else np.zeros(0, np.int32),
        slot_of=np.concatenate(slot_of) if slot_of else np.zeros(0, np.int32),
        tf_of=np.concatenate(tf_of) if tf_of else np.zeros(0, np.float32),
        vectors=None if mat is None else read,
        dim=0 if mat is None else int(mat.shape[1]),
        graph=serialized,
        graph_slots=None if graph_slots is None else _current(graph_slots, changed),
        graph_keys=keys,
        graph_twins=None if twins is None else np.stack([twins[0], _current(twins[1], changed)]),
    )


def chunks(s: Slots) -> Callable[[int], tuple[Array, Vector] | None]:
    """`s.chunk` for a graph's build, each chunk's pages of the segment's vectors unmapped once read (the build reads
    every vector: they would all be mapped into the process at once)."""

    def chunk(start: int) -> tuple[Array, Vector] | None:
        out = s.chunk(start)
        if s.base is not None:
            s.base.drop(start, start + ann.CHUNK)
        return out

    return chunk


def _current(slots: Array, changed: set[int]) -> Array:
    """The graph's node slots, -1 where the slot changed since its node was added (the node is stale)."""
    out = slots.copy()
    if changed:
        out[np.isin(out, np.fromiter(changed, dtype=np.int64, count=len(changed)))] = -1
    return out


class Lookups:
    """The SQLite reads of a copy opened from a segment (its rows by rowid, every row's metadata) and of a save (the
    rowids of the rows written since), on the index's connection under its lock."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock, columns: str) -> None:
        self._conn, self._lock, self._columns = conn, lock, columns

    def _among(
        self, columns: str, key: str, context_id: str, values: Sequence[Any], first: tuple[Any, ...] = ()
    ) -> list[Any]:
        """`SELECT columns FROM docs` of the context's rows whose `key` is among `values` (500 at a time); `first`: the
        parameters of `columns`."""
        parts = [values[at : at + 500] for at in range(0, len(values), 500)]
        # by rowid: `+` keeps SQLite from walking the context's index instead of looking each rowid up (13 ms at 60k)
        sql = "SELECT {} FROM docs WHERE {}context_id=? AND {} IN ({})"
        plus = "+" if key == "rowid" else ""
        with self._lock:
            return [
                r
                for part in parts
                for r in self._conn.execute(
                    sql.format(columns, plus, key, ",".join("?" * len(part))), (*first, context_id, *part)
                )
            ]

    def rows(self, context_id: str, rowids: Sequence[int]) -> dict[int, Row]:
        return {
            int(r[0]): parse_row(r[1:8]) for r in self._among(f"rowid, {self._columns}", "rowid", context_id, rowids)
        }

    def values(self, context_id: str, rowids: Sequence[int], key: str) -> dict[int, tuple[str, str | None, Any]]:
        """Each row's id, the JSON type of its metadata `key` and that value (None, None: it has none), by SQLite's
        JSON functions: no row parsed (`take.values_of`; `key` one a quoted JSON path names as it is)."""
        path = f'$."{key}"'
        rows = self._among("rowid, id, json_type(metadata, ?), json_extract(metadata, ?)", "rowid", context_id, rowids,
                           (path, path))  # fmt: skip
        return {int(r[0]): (r[1], r[2], r[3]) for r in rows}

    def metadata(self, context_id: str, key: str, values: frozenset[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each rowid and metadata of the context's rows that may hold one of `values` under `key`: those whose indexed
        key (`INDEXED`) is one of them when they are strings, every row otherwise (the caller checks each)."""
        by = INDEXED.get(key)
        if by is not None and values and all(isinstance(v, str) for v in values):
            rows = self._among("rowid, metadata", by, context_id, sorted(values))
        else:
            with self._lock:
                sql = "SELECT rowid, metadata FROM docs WHERE context_id=?"
                rows = self._conn.execute(sql, (context_id,)).fetchall()
        for rowid, metadata in rows:
            yield int(rowid), json.loads(metadata)

    def rowids(self, context_id: str, parts: Parts, base: Segment | None) -> Array:
        """Each slot's rowid (-1: free): a segment's own as it had them, the rest looked up by id."""
        n = 0 if base is None else base.n
        out = np.full(parts.n, -1, dtype=np.int64)
        if base is not None:
            out[:n] = np.where(parts.tags[:n] >= 0, base.rowids, -1)
        ids = parts.ids[n:]
        found = dict(self._among("id, rowid", "id", context_id, [i for i in ids if i]))
        out[n:] = np.fromiter((found.get(i, -1) if i else -1 for i in ids), dtype=np.int64, count=len(ids))
        return out

    def documents(self, context_id: str, after: str | None, limit: int) -> list[IndexDoc]:
        """A page of the context's documents in id order, from SQLite."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {self._columns} FROM docs WHERE context_id=? AND id>? ORDER BY id LIMIT ?",
                (context_id, after or "", limit),
            ).fetchall()
        out = []
        for r in rows:
            row = parse_row(r[:7])
            vector = None if r[7] is None else np.frombuffer(r[7], dtype=np.float32)
            out.append(IndexDoc(context_id, row.kind, row.id, row.text, vector, row.scopes, row.valid_from,
                                row.valid_until, row.metadata))  # fmt: skip
        return out


def parse_row(r: Sequence[Any]) -> Row:
    """A row of `docs`' first seven columns (id, kind, text, scopes, valid_from, valid_until, metadata)."""
    id_, kind, text, scopes, vf, vu, meta = r
    return Row(id_, kind, text, tuple(json.loads(scopes)), parse_time(vf), parse_time(vu), json.loads(meta))


def flush_at_exit(ref: weakref.ref[Any]) -> None:
    """`SqliteSearchIndex.close` at exit, if the index is still there."""
    index = ref()
    if index is not None:
        with contextlib.suppress(Exception):  # the process is ending: a segment not saved is loaded from SQLite
            index.close()
