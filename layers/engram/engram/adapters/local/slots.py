"""The in-memory copy of one context's index documents that `SqliteSearchIndex` ranks: slots of rows, an
inverted index for BM25, a vector matrix for exact cosine search, and each slot's filters as arrays (scope tag
set, validity), so a query's filters are masks and only the rows it returns are touched (issue #26)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from engram.adapters.local import ann
from engram.adapters.local.rows import Mask, Row, among, facet_mask, faceted, field_of, kinds_mask, micros
from engram.adapters.local.segment import Array, Segment
from engram.kernel.ports import MetaValue, SearchQuery, Vector
from engram.kernel.scopes import matches
from engram.search.terms import BM25_B, BM25_K1, bm25_idf, index_terms


@dataclass
class Slots:
    """One context's documents in memory: slot i holds `rows[i]` (None when free), its vector (if any),
    its length in terms; `postings[term]` maps slots to term frequencies."""

    rows: list[Row | None] = field(default_factory=list)
    pos: dict[str, int] = field(default_factory=dict)
    free: dict[str, list[int]] = field(default_factory=dict)  # free slots of each kind's pages
    # Slots come in pages, each of one kind: a search of some kinds multiplies only their rows' vectors (a
    # context's memories, documents and code windows share one matrix; issue #26)
    pages: list[tuple[int, int, str]] = field(default_factory=list)  # (first slot, end, kind)
    runs: dict[frozenset[str], list[tuple[int, int]]] = field(default_factory=dict)  # the kinds' pages, merged
    # each slot's distinct terms (tuples of strings: the garbage collector stops tracking them, so a full
    # collection does not walk every indexed document's terms; issue #26)
    terms: list[tuple[str, ...]] = field(default_factory=list)
    lengths: Vector = field(default_factory=lambda: np.zeros(16, dtype=np.float32))
    mat: Vector | None = None
    has_vec: Vector = field(default_factory=lambda: np.zeros(16, dtype=bool))
    postings: dict[str, dict[int, int]] = field(default_factory=dict)
    arrays: dict[str, tuple[Vector, Vector]] = field(default_factory=dict)
    held: int = 0  # the entries `arrays` holds (at most HELD before it starts again)
    total_length: float = 0.0
    seq: int = 0  # the last change (table `changes`) this copy includes
    # slot masks of the kind and metadata filters queries use (`matching`), until the next write
    masks: dict[tuple[str, frozenset[Any]], Mask] = field(default_factory=dict)
    facets: dict[str, dict[str, set[int]]] = field(default_factory=dict)  # rows in memory by value (`rows.faceted`)
    # `allowed`'s masks by selector, each with the instants [from, until) it holds for, until the next write
    visible: dict[Any, tuple[int, int, Mask]] = field(default_factory=dict)
    # a search's filters as one mask, and BM25's statistics within it (`take.within`, `counted`), until the next write
    kept: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    # what `visible` reads of each slot, as arrays (`allowed`): its tag set (an index into `tag_sets`; -1 for a
    # free slot) and its validity in microseconds since the epoch (open ends at the int64 limits)
    tags: Vector = field(default_factory=lambda: np.full(16, -1, dtype=np.int32))
    tag_sets: list[tuple[str, ...]] = field(default_factory=list)
    tag_ids: dict[tuple[str, ...], int] = field(default_factory=dict)
    valid_from: Vector = field(default_factory=lambda: np.full(16, _NEVER, dtype=np.int64))
    valid_until: Vector = field(default_factory=lambda: np.full(16, _NEVER, dtype=np.int64))
    # an approximate graph over the vectors (`engram.adapters.local.ann`), once the context is large: `fresh` holds
    # the slots changed since it was built (scored exactly beside its candidates), `next_fresh` those changed since
    # a build now running began (None: none is)
    graph: ann.Graph | None = None
    fresh: set[int] = field(default_factory=set)
    next_fresh: set[int] | None = None
    adding: bool = False  # a thread adds `fresh`'s vectors to the graph (`take_adds`, `added`)
    in_flight: set[int] = field(default_factory=set)  # taken from `fresh`, not yet in the graph: scored exactly too
    # slots [0, base.n) opened from a saved segment (`engram.adapters.local.segment`): no Row, terms or float32
    # vector of theirs in memory — rows read when returned (`read_rows`: rowids to rows), a metadata filter's mask
    # from `read_metadata` (every rowid and metadata); a changed or removed one is dead (its tag -1), never reused
    base: Segment | None = None
    read_rows: Callable[[Sequence[int]], dict[int, Row]] | None = None
    read_metadata: Callable[[str, frozenset[Any]], Iterator[tuple[int, dict[str, MetaValue]]]] | None = None
    read_values: Callable[[Sequence[int], str], dict[int, tuple[str, str | None, Any]]] | None = None  # (`values_of`)
    unsaved: int = 0  # changes since the copy was loaded or saved

    @property
    def live(self) -> int:
        return len(self.pos)

    def reserve(self, rows: int) -> None:
        """Room for `rows` documents (and each kind's last page) at once: arrays made at their size, not doubled
        (and copied) again and again as a large context loads."""
        want = rows + rows // 8 + 4 * MAX_PAGE
        while self.lengths.shape[0] < want:
            self._grow(want)

    def _grow(self, at_least: int = 0) -> None:
        old = self.lengths.shape[0]
        more = max(old, at_least - old)  # doubled, or to `at_least`
        self.lengths = np.concatenate([self.lengths, np.zeros(more, dtype=np.float32)])
        self.has_vec = np.concatenate([self.has_vec, np.zeros(more, dtype=bool)])
        self.tags = np.concatenate([self.tags, np.full(more, -1, dtype=np.int32)])
        self.valid_from = np.concatenate([self.valid_from, np.full(more, _NEVER, dtype=np.int64)])
        self.valid_until = np.concatenate([self.valid_until, np.full(more, _NEVER, dtype=np.int64)])
        if self.mat is not None:  # zeros are pages not yet touched: a segment's slots cost nothing here
            mat = np.zeros((old + more, self.mat.shape[1]), dtype=np.float32)
            low = self.base_n
            mat[low:old] = self.mat[low:old]
            self.mat = mat

    @property
    def base_n(self) -> int:
        return 0 if self.base is None else self.base.n

    def _forget(self) -> None:  # a write: the masks and statistics kept for queries no longer hold
        self.masks.clear()
        self.visible.clear()
        self.kept.clear()

    def put(self, row: Row, vec: Vector | None) -> None:
        self._forget()
        self.unsaved += 1
        i = self.pos.get(row.id)
        old = self.rows[i] if i is not None else None
        if i is not None and old is not None and old.text == row.text and old.kind == row.kind:  # vectors added
            faceted(self.facets, i, old, False)
            self.rows[i] = row
            faceted(self.facets, i, row, True)
            self._set_filters(i, row)
            self._set_vector(i, vec)
            return
        self.remove(row.id)
        i = self._slot(row.kind)
        terms = index_terms(row.text)
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        self.rows[i], self.terms[i], self.pos[row.id] = row, tuple(counts), i
        faceted(self.facets, i, row, True)
        self.lengths[i] = len(terms)
        self.total_length += len(terms)
        for t, n in counts.items():
            self.postings.setdefault(t, {})[i] = n
            self.arrays.pop(t, None)
        self._set_filters(i, row)
        self._set_vector(i, vec)

    def _slot(self, kind: str) -> int:
        """A free slot in a page of `kind`; a new page (a quarter of the slots so far, 64 to 4,096) when none."""
        free = self.free.get(kind)
        if free:
            return free.pop()
        start = len(self.rows)
        size = max(PAGE, min(MAX_PAGE, start // 4))
        while self.lengths.shape[0] < start + size:
            self._grow()
        self.rows.extend([None] * size)
        self.terms.extend(() for _ in range(size))
        self.pages.append((start, start + size, kind))
        self.runs.clear()
        self.free[kind] = list(range(start + size - 1, start, -1))  # taken in slot order
        return start

    def _runs(self, kinds: frozenset[str]) -> list[tuple[int, int]]:
        """The slot ranges of the pages of `kinds`, adjacent pages merged."""
        found = self.runs.get(kinds)
        if found is None:
            found = []
            for start, end, kind in self.pages:  # in slot order
                if kind in kinds:
                    if found and found[-1][1] == start:
                        found[-1] = (found[-1][0], end)
                    else:
                        found.append((start, end))
            self.runs[kinds] = found
        return found

    def _set_filters(self, i: int, row: Row) -> None:
        tags = tuple(row.scopes)
        tag = self.tag_ids.get(tags)
        if tag is None:
            tag = self.tag_ids[tags] = len(self.tag_sets)
            self.tag_sets.append(tags)
        self.tags[i] = tag
        self.valid_from[i] = micros(row.valid_from, _EARLIEST)
        self.valid_until[i] = micros(row.valid_until, _LATEST)

    def set_validity(self, id_: str, valid_until: datetime | None) -> None:
        i = self.pos.get(id_)
        if i is None:
            return
        row = self.rows[i]
        if row is not None:
            row.valid_until = valid_until
        elif i >= self.base_n:
            return
        self.valid_until[i] = micros(valid_until, _LATEST)
        self.visible.clear()
        self.unsaved += 1

    def allowed(self, q: SearchQuery, now: datetime) -> Mask:
        """The slots `visible` keeps for `q` but its metadata filters (`matching` has those): valid at the
        query's instant, scope tags that match its visibility — the same rule, over arrays. Kept per selector
        (read-only) until the next write, for the instants between the validity bounds either side of `t`."""
        cap = len(self.rows)
        t = micros(q.as_of or now, _LATEST)
        key = None if q.visibility is None else tuple(tuple(clause) for clause in q.visibility)
        kept = self.visible.get(key)
        if kept is not None and kept[0] <= t < kept[1] and kept[2].shape[0] == cap:
            return kept[2]
        starts, ends = self.valid_from[:cap], self.valid_until[:cap]
        ok: Mask = (starts <= t) & (t < ends)
        seen = np.fromiter((matches(tags, q.visibility) for tags in self.tag_sets), bool, len(self.tag_sets))
        tags = self.tags[:cap]
        ok &= tags >= 0
        if seen.shape[0]:
            ok &= seen[np.maximum(tags, 0)]
        # no slot's validity starts or ends in [since, until): the mask holds for every instant there
        since = max(
            int(np.max(starts, where=starts <= t, initial=_EARLIEST)),
            int(np.max(ends, where=ends <= t, initial=_EARLIEST)),
        )
        until = min(
            int(np.min(starts, where=starts > t, initial=_LATEST)), int(np.min(ends, where=ends > t, initial=_LATEST))
        )
        ok.flags.writeable = False
        if len(self.visible) > 64:
            self.visible.clear()
        self.visible[key] = (since, until, ok)
        return ok

    def _touched(self, i: int) -> None:
        if self.graph is not None:
            self.fresh.add(i)
        if self.next_fresh is not None:
            self.next_fresh.add(i)

    def _set_vector(self, i: int, vec: Vector | None) -> None:
        self._touched(i)
        self.has_vec[i] = False
        if vec is not None:
            if self.mat is None:
                self.mat = np.zeros((self.lengths.shape[0], vec.shape[0]), dtype=np.float32)
            if vec.shape[0] == self.mat.shape[1]:
                self.mat[i] = vec
                self.has_vec[i] = True

    def remove(self, id_: str) -> None:
        self._forget()
        i = self.pos.pop(id_, None)
        if i is None:
            return
        self.unsaved += 1
        if i < self.base_n:  # a segment's slot: dead (its postings in the files skip it by its tag)
            self.total_length -= float(self.lengths[i])
            self._touched(i)
            self.lengths[i], self.has_vec[i], self.tags[i] = 0, False, -1
            self.arrays.clear()
            self.held = 0
            return
        for t in self.terms[i]:
            posting = self.postings.get(t)
            if posting is not None:
                posting.pop(i, None)
                if not posting:
                    del self.postings[t]
            self.arrays.pop(t, None)
        self.total_length -= float(self.lengths[i])
        kind = row.kind if (row := self.rows[i]) is not None else ""
        faceted(self.facets, i, row, False)
        self.rows[i], self.terms[i] = None, ()
        self._touched(i)
        self.lengths[i], self.has_vec[i], self.tags[i] = 0, False, -1
        self.free.setdefault(kind, []).append(i)  # its page's kind (a slot holds rows of that kind only)

    def _posting(self, term: str) -> tuple[Vector, Vector]:
        found = self.arrays.get(term)
        if found is None:
            posting = self.postings.get(term, {})
            found = (
                np.fromiter(posting.keys(), dtype=np.int64, count=len(posting)),
                np.fromiter(posting.values(), dtype=np.float32, count=len(posting)),
            )
            if self.base is not None:
                slots, tfs = self.base.posting(term)
                live = self.tags[slots] >= 0
                found = (np.concatenate([slots[live], found[0]]), np.concatenate([tfs[live], found[1]]))
            self.held += found[0].shape[0]
            if self.held > HELD:  # a segment's postings are copied for the live slots: keep a bounded few
                self.arrays.clear()
                self.held = found[0].shape[0]
            self.arrays[term] = found
        return found

    def df(self, term: str, within: Mask | None = None) -> int:
        """How many documents hold `term` (of the slots `within`, when given)."""
        return _held(self._posting(term)[0], within)

    def row_list(self, slots: Sequence[int]) -> list[Row | None]:
        """The rows of `slots` (None for a free one): a segment's read from SQLite, together."""
        n = self.base_n
        if not n or self.base is None or self.read_rows is None:
            return [self.rows[i] for i in slots]
        base, tags = self.base, self.tags
        wanted = [i for i in slots if i < n and tags[i] >= 0]
        read = self.read_rows([int(base.rowids[i]) for i in wanted]) if wanted else {}
        found = {i: r for i in wanted if (r := read.get(int(base.rowids[i]))) is not None and r.id == base.ids[i]}
        return [found.get(i) if i < n else self.rows[i] for i in slots]

    def vectors_of(self, ids: Sequence[str]) -> dict[str, Vector]:
        """The vectors of the documents `ids` that have one (copies)."""
        known = [(i, s) for i in ids if (s := self.pos.get(i)) is not None]
        if self.mat is None or not known:
            return {}
        slots = np.fromiter((s for _, s in known), dtype=np.int64, count=len(known))
        has = self.has_vec[slots]
        return dict(
            zip((i for (i, _), h in zip(known, has.tolist(), strict=True) if h), self.vecs(slots[has]), strict=True)
        )

    def vecs(self, slots: Array) -> Vector:
        """The vectors of `slots` (a segment's from its file)."""
        assert self.mat is not None
        n = self.base_n
        if not n or self.base is None or self.base.vectors is None:
            found: Vector = self.mat[slots]
            return found
        out = np.empty((slots.shape[0], self.mat.shape[1]), dtype=np.float32)
        old = slots < n
        out[old] = self.base.rows(slots[old])
        out[~old] = self.mat[slots[~old]]  # (a segment's part of `mat` is never read: its pages stay untouched)
        return out

    def _product(self, start: int, end: int, qv: Vector) -> Vector:
        """Cosines of slots [start, end) with `qv`; -inf where a slot has no vector."""
        assert self.mat is not None
        n = self.base_n
        base = self.base
        if base is None or base.vectors is None or start >= n:
            return np.where(self.has_vec[start:end], self.mat[start:end] @ qv, -np.inf)
        parts = [base.product(start, min(end, n), qv)]
        if end > n:
            parts.append(self.mat[n:end] @ qv)
        return np.where(self.has_vec[start:end], np.concatenate(parts), -np.inf)

    def bm25(self, terms: Mapping[str, float], match_all: bool, stats: Stats | None = None) -> tuple[Vector, Array]:
        """A score per slot (each term's BM25 times its weight) and the slots that match, ascending (holding a term;
        every one with match_all): only theirs are looked at again (`take`'s candidates). No count of matched terms
        unless needed (positive weights: a match scores > 0; a second array the size of the context is ~1 ms at 1M).
        `stats`: BM25's statistics (`take.counted`: within what the search may return; None: the context's own)."""
        cap = len(self.rows)
        scores = np.zeros(cap, dtype=np.float32)
        n, total, within = stats or (self.live, self.total_length, None)
        if n == 0 or not terms:
            return scores, np.zeros(0, dtype=np.int64)
        counted = match_all or any(w <= 0 for w in terms.values())
        matched = np.zeros(cap, dtype=np.int32) if counted else None
        average = total / n or 1.0
        for t, weight in terms.items():
            slots, tfs = self._posting(t)
            df = _held(slots, within)
            if df == 0:
                continue
            idf = weight * bm25_idf(n, df)
            norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths[slots] / average)  # the posting's slots only
            scores[slots] += idf * tfs * (BM25_K1 + 1) / (tfs + norm)
            if matched is not None:
                matched[slots] += 1
        if matched is None:
            return scores, np.flatnonzero(scores > 0)
        return scores, np.flatnonzero(matched >= (len(terms) if match_all else 1))

    def matching(self, q: SearchQuery) -> Mask | None:
        """Which slots a query's kind and metadata-equality filters keep (None: no such filter), so ranking
        skips the rest at once instead of walking past them (a thread's messages among many threads). Kept
        per filter, and per combination of them, until the next write (read-only)."""
        if q.kinds is None and not q.metadata:
            return None
        cap = len(self.rows)
        wanted: list[tuple[str, frozenset[Any]]] = [] if q.kinds is None else [("", frozenset(q.kinds))]
        for key, want in q.metadata.items():
            wanted.append((key, frozenset(want) if isinstance(want, list | tuple) else frozenset([want])))
        combined: tuple[str, Any] = ("&", frozenset(wanted)) if len(wanted) > 1 else wanted[0]
        keep = self.masks.get(combined)
        if keep is not None and keep.shape[0] == cap:
            return keep
        if len(self.masks) > 64:
            self.masks.clear()
        keep = np.ones(cap, dtype=bool)
        for key, values in wanted:
            mask = self.masks.get((key, values))
            if mask is None or mask.shape[0] != cap:
                n = 0 if self.base is None else self.base.n  # a segment's slots: its own mask (its rows never change)
                made = kinds_mask(self._runs, values, self.tags, cap) if key == "" else None
                mask = facet_mask(self.facets, key, values, cap) if made is None else made
                if mask is None:
                    mask = np.zeros(cap, dtype=bool)
                    mask[n:] = np.fromiter((among(field_of(r, key), values) for r in self.rows[n:]), bool, cap - n)
                if self.base is not None:
                    mask[:n] = self.base.mask(key, values, self.read_metadata, among)
                mask.flags.writeable = False
                self.masks[(key, values)] = mask
            keep &= mask
        keep.flags.writeable = False
        self.masks[combined] = keep
        return keep

    def wants_graph(self) -> bool:
        """Whether a graph should be built now: none is being built, and there is none while the context is large,
        or too many of its vectors changed since."""
        if self.next_fresh is not None or self.mat is None:
            return False
        if self.graph is None:
            return self.live >= ann.MIN_VECTORS
        return len(self.graph) > (1 + ann.REBUILD) * max(1, int(np.count_nonzero(self.has_vec)))

    def wants_adds(self) -> bool:
        """Whether vectors changed since the graph was built should be added to it now (none is being built, and
        no thread adds them yet)."""
        return self.graph is not None and bool(self.fresh) and self.next_fresh is None and not self.adding

    def take_adds(self) -> tuple[ann.Graph, Vector, Vector] | None:
        """Up to `ann.ADD` of the changed slots and their vectors (copied), for the graph: added outside the copy's
        lock, so its writes never wait on the graph (they did: ~15 % of a store at 100k). None when none is left."""
        graph = self.graph
        if graph is None or self.next_fresh is not None or not self.fresh:
            self.adding = False
            return None
        batch = np.fromiter((self.fresh.pop() for _ in range(min(ann.ADD, len(self.fresh)))), dtype=np.int64)
        batch = batch[batch < len(self.rows)]
        batch = batch[self.has_vec[batch]]
        self.in_flight.update(batch.tolist())
        return graph, batch, self.vecs(batch)

    def added(self, batch: Vector) -> bool:
        """`batch` is in the graph now: True when no changed slot is left to add."""
        self.in_flight.difference_update(batch.tolist())
        self.adding = bool(self.fresh) and self.next_fresh is None
        return not self.adding

    def begin_graph(self) -> None:
        self.next_fresh = set()

    def chunk(self, start: int) -> tuple[Array, Vector] | None:
        """The slots from `start` that hold a vector, and their vectors (copied): what a graph is built from."""
        cap = len(self.rows)
        if start >= cap or self.mat is None:
            return None
        end = min(cap, start + ann.CHUNK)
        slots = (start + np.flatnonzero(self.has_vec[start:end])).astype(np.int64)
        return slots, self.vecs(slots)

    def install(self, graph: ann.Graph) -> None:
        self.graph, self.fresh, self.next_fresh = graph, self.next_fresh or set(), None

    def nearest(
        self, qv: Vector, limit: int, kinds: Sequence[str] | None, keep: Mask | None
    ) -> tuple[Vector, Vector] | None:
        """As `cosine`, but only for the graph's candidates for `limit` results and the slots changed since it was
        built (each scored exactly; the rest -inf), with those slots (ascending). None when there is no graph, or
        `keep` keeps so few slots that `cosine` multiplies only theirs."""
        graph, cap = self.graph, len(self.rows)
        if graph is None or self.mat is None or qv.shape[0] != self.mat.shape[1]:
            return None
        if keep is not None and np.count_nonzero(keep[:cap]) * SELECTIVE < cap:
            return None
        found = np.unique(graph.candidates(qv, max(limit * ann.CANDIDATES, ann.MIN_CANDIDATES)))
        if self.fresh or self.in_flight:
            changed = self.fresh | self.in_flight
            found = np.union1d(found, np.fromiter(changed, dtype=np.int64, count=len(changed)))
        found = found[found < cap]
        found = found[self.has_vec[found]]
        if kinds is not None:
            ok = np.zeros(found.shape[0], dtype=bool)
            for start, end in self._runs(frozenset(kinds)):
                ok |= (found >= start) & (found < end)
            found = found[ok]
        scores = np.full(cap, -np.inf, dtype=np.float32)
        scores[found] = self.vecs(found) @ qv
        return scores, found

    def cosine(self, qv: Vector, kinds: Sequence[str] | None = None, keep: Mask | None = None) -> Vector:
        """Each slot's cosine with `qv` (its vectors are unit length); -inf where it has none, or holds
        another kind than `kinds` (only those pages are multiplied), or — when `keep` (the query's kind and
        metadata mask, `matching`) keeps few slots — where `keep` drops it (only its rows are multiplied)."""
        cap = len(self.rows)
        if self.mat is None or qv.shape[0] != self.mat.shape[1]:
            return np.full(cap, -np.inf, dtype=np.float32)
        kept = np.flatnonzero(keep[:cap]) if keep is not None else None
        if kept is not None and kept.shape[0] * SELECTIVE < cap:
            scores = np.full(cap, -np.inf, dtype=np.float32)
            scores[kept] = np.where(self.has_vec[kept], self.vecs(kept) @ qv, -np.inf)
            return scores
        runs = [(0, cap)] if kinds is None else self._runs(frozenset(kinds))
        scores = np.full(cap, -np.inf, dtype=np.float32)
        for start, end in runs:  # only where a row has a vector
            scores[start:end] = self._product(start, end, qv)
        return scores


_NEVER = 0
PAGE, MAX_PAGE = 64, 4096
HELD = 4_000_000  # posting entries kept as arrays (12 bytes each: ~48 MB); past that, made again when asked
SELECTIVE = 32  # a mask keeping under 1/32 of the slots (a thread among many): multiply its rows alone
_EARLIEST, _LATEST = np.iinfo(np.int64).min, np.iinfo(np.int64).max
Stats = tuple[int, float, "Mask | None"]  # BM25's statistics: documents, their total length, the mask (None: all live)


def _held(slots: Array, within: Mask | None) -> int:  # how many of a posting's slots are within (all without a mask)
    return int(slots.shape[0] if within is None else np.count_nonzero(within[slots]))
