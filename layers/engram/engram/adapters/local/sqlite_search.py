"""SearchIndex on SQLite (the documents, durable) with the ranking done in memory, per context.

The first search in a context loads its documents into a `Slots`: an inverted index for BM25 (the rules of
`engram.search.rules`: Snowball stems, k1 1.5, b 0.75, Lucene's idf) and a vector matrix for cosine search — exact,
or once a context holds `ann.MIN_VECTORS` documents, over an approximate graph's candidates rescored exactly (built
in the background; `engram.adapters.local.ann`). Every write updates SQLite and, when loaded, the context's copy, so
a query is a few numpy operations over that context alone (well under a millisecond per 10k documents), whatever the
other contexts hold. A large context (`saving.large`) is saved beside the file as a segment and opened from it on
the next start (`engram.adapters.local.segment`): seconds for a million documents, rows read only when returned."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from engram.adapters.local import saving, segment
from engram.adapters.local.ann import Graph, add_in_background, build_in_background
from engram.adapters.local.rows import Row
from engram.adapters.local.saving import COLUMNS, SCHEMA, Lookups, chunks, flush_at_exit, opened, parse_row, parts_of
from engram.adapters.local.slots import Slots
from engram.adapters.local.sqlite_records import connect, expunge
from engram.adapters.local.take import bm25_list, counts, hits, stems_held, take, values_in
from engram.kernel.clock import iso
from engram.kernel.ports import Closing, Hit, IndexDoc, SearchQuery, Vector
from engram.kernel.ranked import Ranked
from engram.search import rules as search_rules

T = TypeVar("T")
PARALLEL = 100_000  # a context this large makes a hybrid search's two lists at once (`_both`)
LARGE = 50_000  # a context loaded with the cyclic collector paused, then frozen (`_load`)
KEEP_CHANGES = 100_000  # change rows kept; a copy further behind than that loads its context again
SAVE_EVERY, SAVE_SHARE = 20_000, 0.05  # saved again after this many changes, or this share of it if more


class SqliteSearchIndex:
    """Many processes may share the file (`engram serve`, `engram stdio`, the CLI): every write also
    appends to `changes` in its transaction, and a process whose in-memory copy of a context is behind
    (another connection committed: `PRAGMA data_version` moved) applies the changed rows before it reads.
    `generation(context)` is the context's last change: what a cache of search results is keyed by."""

    def __init__(
        self, path: Path | str, *, segments: bool = True, rules: search_rules.Rules = search_rules.DEFAULT
    ) -> None:
        """`segments`: large contexts saved as segments, opened from those (False: from SQLite); `rules`: hybrid's."""
        self.rules, self._conn = rules, connect(path)
        self._lock = threading.RLock()  # the connection and which copies are loaded
        self._locks: dict[str, threading.RLock] = {}  # each loaded copy's: searches of one context run alone
        self._searching = threading.local()  # `checked`: this thread's search has looked for others' commits
        self._conn.executescript(SCHEMA)
        self._contexts: dict[str, Slots] = {}
        self._data_version = self._pragma_data_version()
        self._stale: set[str] = set()
        self._writes = 0
        self.graphs: list[threading.Thread] = []  # the graph builds started (`ann`): tests and benches wait on them
        self._segments = Path(f"{path}.segments")
        # which database a segment was made from: one made from another (a file replaced by hand) is not opened
        self._token = str(self._conn.execute("SELECT token FROM identity").fetchone()[0])
        if segments:
            segment.claim(self._segments, self._token)
        self._use_segments = segments
        self._saving: dict[str, bool] = {}  # contexts a thread is saving: whether to save again (a graph came)
        self._pending: dict[str, list[int]] = {}  # writes committed, not yet in memory: the last change before each
        self._erasures = 0  # a save begun before an erasure is not kept (`expunge`)
        self._publish = threading.Lock()  # a segment's publication, and the removal of all of them
        self.saves: list[threading.Thread] = []
        self._closing = False  # the process is ending: graph builds and additions stop (`close`)
        self._lookups = Lookups(self._conn, self._lock, COLUMNS)
        self._helper = ThreadPoolExecutor(max_workers=2, thread_name_prefix="engram-lists")  # `_both`'s vector lists
        atexit.register(flush_at_exit, weakref.ref(self))

    # -- writes ---------------------------------------------------------------------------

    def expunge(self) -> None:
        """After an erasure: the change log forgets every id it named (an entity's id holds its name), leaving one
        mark a context, past which a process whose copy is behind loads the context again, from what is left; then
        the freed pages and the log file are overwritten (`secure_delete`, a checkpoint that truncates)."""
        with self._lock:
            self._refresh_marks()  # copies another process's commits left behind stay so: they will load again
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                contexts = [r[0] for r in self._conn.execute("SELECT DISTINCT context_id FROM changes")]
                self._conn.execute("DELETE FROM changes")
                self._conn.executemany("INSERT INTO changes (context_id, id) VALUES (?, '')", [(c,) for c in contexts])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            # copies load again from what is left: segments (files, graph, vocabulary) hold erased vectors, stems, ids
            self._contexts.clear()
            self._stale.clear()
            with self._publish:
                self._erasures += 1
                segment.remove_all(self._segments)
                if self._use_segments:
                    segment.claim(self._segments, self._token)
            expunge(self._conn)

    def ensure(self) -> None:  # the tables are made when the index is opened
        pass

    def _pragma_data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _changed(self, context_id: str, ids: Sequence[str]) -> None:
        """Log changes (inside the caller's transaction); now and then, forget the oldest."""
        self._conn.executemany("INSERT INTO changes (context_id, id) VALUES (?, ?)", [(context_id, i) for i in ids])
        self._writes += 1
        if self._writes % 1000 == 0:
            self._conn.execute("DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - ?", (KEEP_CHANGES,))

    @contextlib.contextmanager
    def _write(self, work: Callable[[], None], contexts: Iterable[str]) -> Iterator[None]:
        """One write transaction; the body brings the in-memory copies along after it commits (a rollback leaves them
        as they were, and a context that was behind before is brought up to date first). Until the body is done the
        write is pending: a segment saved meanwhile says it holds the changes before it only (`_save`)."""
        contexts = set(contexts)
        with self._lock:
            self._refresh_marks()
            before = int(self._conn.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[0])
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                work()
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                self._contexts.clear()  # the in-memory copies may be ahead of the rolled-back table
                raise
            for c in contexts:
                self._pending.setdefault(c, []).append(before)
        try:
            yield
        finally:
            with self._lock:
                for c in contexts:
                    self._pending[c].remove(before)
                    if not self._pending[c]:
                        del self._pending[c]
        for c in contexts:
            self._maybe_save(c)
            self._maybe_add(c)

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

        by_context: dict[str, list[IndexDoc]] = {}
        for d in docs:
            by_context.setdefault(d.context_id, []).append(d)
        with self._write(work, [*by_context, *(c for c, _, _ in closing)]):
            for context_id, written in by_context.items():
                with self._loaded(context_id) as cache:
                    for d in written:
                        if cache is None:
                            break
                        vec = None if d.vector is None else np.asarray(d.vector, dtype=np.float32)
                        cache.put(self._row_of(d), vec)
            for context_id, id_, until in closing:
                self._set_cached_validity(context_id, id_, until)

    @staticmethod
    def _row_of(d: IndexDoc) -> Row:
        return Row(d.id, d.kind, d.text, tuple(d.scopes), d.valid_from, d.valid_until, dict(d.metadata))

    def delete(self, context_id: str, ids: Sequence[str]) -> None:
        def work() -> None:
            for id_ in ids:
                self._conn.execute("DELETE FROM docs WHERE context_id=? AND id=?", (context_id, id_))
            self._changed(context_id, ids)

        with self._write(work, [context_id]), self._loaded(context_id) as cache:
            if cache is not None:
                for id_ in ids:
                    cache.remove(id_)

    def set_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        def work() -> None:
            self._conn.execute(
                "UPDATE docs SET valid_until=? WHERE context_id=? AND id=?", (iso(valid_until), context_id, id)
            )
            self._changed(context_id, [id])

        with self._write(work, [context_id]):
            self._set_cached_validity(context_id, id, valid_until)

    def _set_cached_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        with self._loaded(context_id) as cache:
            if cache is not None:
                cache.set_validity(id, valid_until)

    def count(self, context_id: str) -> int:
        with self._open(context_id) as cache:
            return cache.live

    def generation(self, context_id: str) -> int | None:
        with self._lock:
            return self._last_seq(context_id)

    # -- reads ----------------------------------------------------------------------------

    def _refresh_marks(self) -> None:
        """Every loaded context may be behind when another connection committed. Call with the lock held."""
        version = self._pragma_data_version()
        if version != self._data_version:
            self._data_version = version
            self._stale |= set(self._contexts)

    def _last_seq(self, context_id: str) -> int:
        row = self._conn.execute("SELECT max(seq) FROM changes WHERE context_id=?", (context_id,)).fetchone()
        return int(row[0] or 0)

    def _load(self, context_id: str) -> Slots:
        """The context's copy: from its newest segment, with the changes logged since applied, when the log reaches
        back that far; from SQLite otherwise."""
        seg = segment.latest(self._segments, context_id, self._token) if self._use_segments else None
        first = self._conn.execute("SELECT min(seq) FROM changes").fetchone()[0]
        if seg is None or (first is not None and seg.seq < int(first) - 1):
            return self._load_rows(context_id)
        cache = opened(seg)
        cache.read_rows = lambda rowids: self._lookups.rows(context_id, rowids)
        cache.read_metadata = lambda key, values: self._lookups.metadata(context_id, key, values)
        cache.read_values = lambda rowids, key: self._lookups.values(context_id, rowids, key)
        cache = self._catch_up(context_id, cache)
        cache.unsaved = 0 if cache.seq == seg.seq else cache.unsaved
        return cache

    def _maybe_save(self, context_id: str, now: bool = False) -> None:
        """Save a large context's copy in the background once enough changed since it was opened or saved (or `now`)."""
        with self._lock:
            cache = self._contexts.get(context_id)
            if cache is None or not saving.large(cache) or not self._use_segments:
                return
            if context_id in self._saving:  # a save under way may have taken its parts before a graph was installed
                self._saving[context_id] |= now
                return
            if cache.unsaved < max(SAVE_EVERY, SAVE_SHARE * cache.live) and not now:
                return
            self._saving[context_id] = False
        # not a daemon: a process's exit waits for a save under way (and `close` saves what is left)
        thread = threading.Thread(target=self._save, args=(context_id,), name="engram-segment")
        self.saves.append(thread)
        thread.start()

    def _save(self, context_id: str) -> None:
        """Write the context's copy as its newest segment: its parts taken under its lock, written outside it."""
        try:
            with self._held(context_id):  # the copy's writes wait; other contexts' searches and writes go on
                with self._lock:
                    # the copy holds every change up to the first pending write (committed, not yet in memory)
                    last = min(self._pending.get(context_id) or [self._last_seq(context_id)])
                    erasures = self._erasures
                    cache = self._context(context_id)  # up to date with every change up to `last` (and maybe more)
                parts = parts_of(cache, last)
                cache.unsaved = 0
            rowids = self._lookups.rowids(context_id, parts, cache.base)
            made = segment.write_folder(self._segments, context_id, parts, rowids, self._token)
            with self._publish:  # a save begun before an erasure is dropped
                (segment.publish if erasures == self._erasures else segment.discard)(made)
        finally:
            with self._lock:
                again = self._saving.pop(context_id, False)
            if again:
                self._maybe_save(context_id, now=True)

    def flush(self) -> None:
        """Save every large loaded context changed since it was opened or saved (a process's exit does this)."""
        while waiting := [t for t in self.saves if t.is_alive()]:  # a save may start another as it ends
            waiting[0].join()
        with self._lock:
            due = [c for c, copy in self._contexts.items() if copy.unsaved and saving.large(copy)]
        for context_id in due if self._use_segments else []:
            with self._lock:
                if context_id in self._saving:
                    continue
                self._saving[context_id] = False
            self._save(context_id)

    def close(self) -> None:
        """At exit: graph builds and additions stop and are waited for (faiss as the interpreter ends can crash it)."""
        self._closing = True
        for thread in list(self.graphs):
            thread.join()
        self.flush()

    def _load_rows(self, context_id: str) -> Slots:
        """The context's copy, from SQLite (its rows in id order): its arrays made once at their size, and the cyclic
        collector paused meanwhile (a million rows are millions of objects that it would walk again and again as
        they arrive; afterwards they are frozen out of its generations)."""
        cache = Slots()
        cache.seq = self._last_seq(context_id)
        count = int(self._conn.execute("SELECT count(*) FROM docs WHERE context_id=?", (context_id,)).fetchone()[0])
        cache.reserve(count)
        rows = self._conn.execute(f"SELECT {COLUMNS} FROM docs WHERE context_id=?", (context_id,))  # in id order
        collecting = gc.isenabled() and count >= LARGE
        if collecting:
            gc.disable()
        try:
            for r in rows:
                cache.put(parse_row(r[:7]), None if r[7] is None else np.frombuffer(r[7], dtype=np.float32))
        finally:
            if collecting:
                gc.enable()
                gc.freeze()
        return cache

    def _catch_up(self, context_id: str, cache: Slots) -> Slots:
        """Apply the rows other processes changed since the copy's last change."""
        first = self._conn.execute("SELECT min(seq) FROM changes").fetchone()[0]
        if first is not None and cache.seq < int(first) - 1:
            return self._load_rows(context_id)  # further behind than the log goes
        changed = self._conn.execute(
            "SELECT seq, id FROM changes WHERE context_id=? AND seq>? ORDER BY seq", (context_id, cache.seq)
        ).fetchall()
        for id_ in dict.fromkeys(i for _, i in changed):
            row = self._conn.execute(f"SELECT {COLUMNS} FROM docs WHERE context_id=? AND id=?", (context_id, id_))
            found = row.fetchone()
            if found is None:
                cache.remove(id_)
            else:
                cache.put(parse_row(found[:7]), None if found[7] is None else np.frombuffer(found[7], np.float32))
        if changed:
            cache.seq = int(changed[-1][0])
        return cache

    def _held(self, context_id: str) -> threading.RLock:
        with self._lock:
            return self._locks.setdefault(context_id, threading.RLock())

    @contextlib.contextmanager
    def _loaded(self, context_id: str) -> Iterator[Slots | None]:
        """The context's copy if one is loaded (None if not), held by its lock: what a write brings up to date."""
        with self._held(context_id):
            with self._lock:
                cache = self._contexts.get(context_id)
            yield cache

    @contextlib.contextmanager
    def _open(self, context_id: str) -> Iterator[Slots]:
        """The context's copy, held by its own lock while the caller reads it (or, for writes, changes it): a
        search of one context never waits for another context's (issue #54). Lock order: the copy's, then the
        connection's — only while the copy is found, loaded or brought up to date."""
        with self._held(context_id):
            with self._lock:
                cache = self._context(context_id)
            yield cache

    def _context(self, context_id: str) -> Slots:
        """The context's documents in memory, loaded from SQLite on first use and brought up to date with
        other processes' writes. Call with the lock held."""
        if not getattr(self._searching, "checked", False):
            self._refresh_marks()
        cache = self._contexts.get(context_id)
        if cache is None:
            cache = self._contexts[context_id] = self._load(context_id)
            self._maybe_save(context_id)  # a large one loaded from rows: saved, so that the next start opens it
        elif context_id in self._stale:
            cache = self._contexts[context_id] = self._catch_up(context_id, cache)
        self._stale.discard(context_id)
        return cache

    def _bm25(self, q: SearchQuery, now: datetime, weights: Mapping[str, float], limit: int) -> Ranked:
        return self._with_copy(q.context_id, bm25_list, q, now, weights, limit)

    def _with_copy(self, context_id: str, read: Callable[..., T], *args: Any) -> T:
        with self._open(context_id) as cache:
            return read(cache, *args)

    def _vector_in(self, cache: Slots, q: SearchQuery, now: datetime, vector: Vector, limit: int) -> Ranked:
        """The graph's candidates when the context has one (`ann`) and at least `limit` of them pass the query's
        filters; every vector otherwise. Call with the copy's lock held (by this thread or the one it works for)."""
        qv = np.asarray(vector, dtype=np.float32)
        self._maybe_add(q.context_id)
        keep = cache.matching(q)
        for wider in (1, 8):  # too few candidates passed the filters: ask the graph for 8x before every vector
            near = cache.nearest(qv, limit * wider, q.kinds, keep)
            if near is None:
                break
            found = hits(take(cache, near[0], keep, q, now, limit, near[1]), cache)
            if len(found.ids) >= limit:
                return found
        if cache.wants_graph():
            self._build_graph(q.context_id, cache)
        return hits(take(cache, cache.cosine(qv, q.kinds, keep), keep, q, now, limit), cache)

    def _maybe_add(self, context_id: str) -> None:
        """Add the vectors changed since the context's graph was built to it, in the background."""
        with self._lock:
            cache = self._contexts.get(context_id)
            if cache is None or not cache.wants_adds() or self._closing:
                return
            cache.adding = True
        held, more = self._held(context_id), cache.take_adds
        self.graphs.append(add_in_background(held, lambda: None if self._closing else more(), cache.added))

    def _build_graph(self, context_id: str, cache: Slots) -> None:
        """Start building the context's graph in the background (with the copy's lock held)."""
        assert cache.mat is not None
        cache.begin_graph()
        install, held, stop = partial(self._install, context_id, cache), self._held(context_id), lambda: self._closing
        self.graphs.append(build_in_background(cache.mat.shape[1], held, chunks(cache), install, stop))

    def _install(self, context_id: str, cache: Slots, graph: Graph) -> None:
        cache.install(graph)
        self._maybe_save(context_id, now=True)  # saved with it

    def vectors(self, context_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        return self._with_copy(context_id, Slots.vectors_of, ids)

    def documents(self, context_id: str, after: str | None, limit: int) -> list[IndexDoc]:
        return self._lookups.documents(context_id, after, limit)

    def term_counts(self, context_id: str, stems: Sequence[str]) -> tuple[int, Mapping[str, int]]:
        return self._with_copy(context_id, lambda cache: (cache.live, {t: cache.df(t) for t in stems}))

    def terms_in(self, context_id: str, ids: Sequence[str], stems: Sequence[str]) -> dict[str, set[str]]:
        return self._with_copy(context_id, stems_held, ids, stems)

    def values(self, query: SearchQuery, key: str, now: datetime, most: int) -> dict[str, int] | None:
        return self._with_copy(query.context_id, values_in, query, now, key, most)

    def search(self, query: SearchQuery, now: datetime) -> list[Hit]:
        """One look for other processes' commits a search (`PRAGMA data_version`), not one for each of its
        reads (its two lists, the vectors it smooths with, its term counts: seven, ~0.1 ms of a recall)."""
        with self._lock:
            self._refresh_marks()
        self._searching.checked = True
        try:
            return self._search(query, now)
        finally:
            self._searching.checked = False
            if (cache := self._contexts.get(query.context_id)) is not None and cache.base is not None:
                cache.base.release()

    def _search(self, query: SearchQuery, now: datetime) -> list[Hit]:
        return search_rules.search(
            query,
            lambda weights, n: self._bm25(query, now, weights, n),
            lambda vector, n: self._with_copy(query.context_id, self._vector_in, query, now, vector, n),
            lambda ids: self.vectors(query.context_id, ids),
            lambda _, stems: self._with_copy(query.context_id, counts, query, now, stems),
            both=partial(self._both, query, now), rules=self.rules,
            terms_in=lambda ids, stems: self.terms_in(query.context_id, ids, stems),
        )  # fmt: skip

    def _both(
        self, q: SearchQuery, now: datetime, weights: Mapping[str, float], vector: Vector | None, limit: int
    ) -> tuple[Sequence[Hit], Sequence[Hit]]:
        """Both lists of a hybrid round under one hold of the copy's lock; in a large context a second thread makes the
        vector list meanwhile (its graph search and products let go of the interpreter's lock), in a small one not."""
        with self._open(q.context_id) as cache:
            if not weights or vector is None or cache.live < PARALLEL:
                bm = bm25_list(cache, q, now, weights, limit) if weights else []
                return bm, (self._vector_in(cache, q, now, vector, limit) if vector is not None else [])
            later = self._helper.submit(self._vector_in, cache, q, now, vector, limit)
            try:
                bm = bm25_list(cache, q, now, weights, limit)
            finally:
                vec = later.result()  # (the lock is held until the helper is done with the copy)
            return bm, vec
