"""The rows a search of the local index returns: the best scores that pass every filter (`SqliteSearchIndex`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from engram.adapters.local.rows import Mask, Row, among, facet_slots
from engram.adapters.local.segment import Array
from engram.adapters.local.slots import Slots, Stats
from engram.kernel.ports import Hit, SearchQuery, Vector
from engram.kernel.ranked import Ranked
from engram.search.filters import visible


def take(
    cache: Slots,
    scores: Vector,
    keep: Mask | None,
    q: SearchQuery,
    now: datetime,
    limit: int,
    candidates: Vector | None = None,
) -> Iterator[tuple[int, Row | None, float]]:
    """Best slots first that pass every filter (ties in slot order), with their rows — None for a segment's, read when
    a hit is made (`hits`). Without range filters every filter is a mask (`matching`, `allowed`), and only the rows
    returned are touched; with them, the candidate window widens until `limit` pass `visible`. `keep`: the query's
    kind and metadata mask (`Slots.matching`). `candidates`: the only slots that may score (ascending; the graph's),
    so only theirs are looked at."""
    if not q.ranges:
        mask = within(cache, q, now, keep)
        if candidates is not None:
            passing = candidates[mask[candidates] & (scores[candidates] > -np.inf)]
        else:
            passing = np.flatnonzero(mask & (scores > -np.inf))
        values = scores[passing]
        if passing.shape[0] > limit:
            cut = np.partition(values, passing.shape[0] - limit)[passing.shape[0] - limit]  # the limit-th best
            passing = passing[values >= cut]  # with those tied with the last: the first by id are kept
            values = scores[passing]
        best = by_id(cache, passing[np.lexsort((passing, -values))], scores)[:limit]
        # plain ints and floats (the float32 scores' exact values): no numpy scalar a row
        rows, n = cache.rows, cache.base_n
        for i, score in zip(best.tolist(), scores[best].tolist(), strict=True):
            if i < n:
                yield i, None, score
            elif (row := rows[i]) is not None:
                yield i, row, score
        return
    if keep is not None:
        scores = np.where(keep, scores, -np.inf).astype(np.float32)
    n, window, start, found = scores.shape[0], max(limit * 4, 64), 0, 0
    seen: dict[tuple[str, ...], bool] = {}
    order = by_id(cache, np.argsort(-scores, kind="stable"), scores) if n <= window else None
    while start < n and found < limit:
        if order is None:
            end = min(n, start + window)
            top = np.argpartition(-scores, end - 1)[:end] if end < n else np.arange(n)
            chunk = by_id(cache, top[np.argsort(-scores[top], kind="stable")], scores)[start:end]
        else:
            end = n
            chunk = order[start:end]
        for i, row in zip(chunk.tolist(), cache.row_list(chunk.tolist()), strict=True):
            score = float(scores[i])
            if score == -np.inf:
                return  # the rest match nothing
            if row is None or (q.kinds is not None and row.kind not in q.kinds):
                continue
            if visible(row.scopes, row.valid_from, row.valid_until, row.metadata, q, now, seen):
                found += 1
                yield i, row, score
                if found >= limit:
                    return
        start, window = end, window * 4


def by_id(cache: Slots, ranked: Array, scores: Vector) -> Array:
    """`ranked` (slots by descending score) with equal scores in id order, as the port promises: which slot a document
    takes depends on the order of the context's writes, and a rebuilt index must rank as the one it replaces."""
    values = scores[ranked]
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))  # each run of equal scores
    ends = np.append(starts[1:], ranked.shape[0])
    if starts.shape[0] == ranked.shape[0]:
        return ranked
    out = ranked.copy()
    base, rows, n = cache.base, cache.rows, cache.base_n
    for a, b in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist(), strict=True):
        run = ranked[a:b].tolist()
        ids = [base.ids[i] if i < n and base is not None else getattr(rows[i], "id", "") for i in run]
        out[a:b] = [i for _, i in sorted(zip(ids, run, strict=True))]
    return out


def bm25_list(cache: Slots, q: SearchQuery, now: datetime, weights: Mapping[str, float], limit: int) -> Ranked:
    """The BM25 list of `q` in a context's copy (its lock held): its matching slots are the candidates; with range
    filters, every slot in score order."""
    keep = cache.matching(q)
    scores, found = cache.bm25(weights, q.match_all, counted(cache, within(cache, q, now, seen_by(cache, q, keep))))
    if not q.ranges:
        return hits(take(cache, scores, keep, q, now, limit, found), cache)
    dense = np.full(scores.shape[0], -np.inf, dtype=np.float32)  # `take` walks every slot in score order
    dense[found] = scores[found]
    return hits(take(cache, dense, keep, q, now, limit), cache)


def within(cache: Slots, q: SearchQuery, now: datetime, keep: Mask | None) -> Mask:
    """The slots a search may return, its range filters aside (each row's, checked as it is returned), with `keep` its
    kind and metadata mask (`matching`); with `seen_by`'s (its kinds aside), what BM25's statistics count, so that a
    score says nothing of memories the caller cannot see, and a narrowed search ranks as if only what it keeps were
    there."""
    allowed = cache.allowed(q, now)
    if keep is None:
        return allowed
    found = cache.kept.get((id(allowed), id(keep)))  # both are kept until the next write: the same objects till then
    if found is not None and found[0] is allowed and found[1] is keep:
        both: Mask = found[2]
        return both
    both = allowed & keep  # `allowed` is shared: not in place
    both.flags.writeable = False
    _keep(cache, (id(allowed), id(keep)), (allowed, keep, both))
    return both


def seen_by(cache: Slots, q: SearchQuery, keep: Mask | None) -> Mask | None:
    """The metadata mask BM25's statistics are counted within (`within`'s `keep`): `q`'s metadata filters, its kinds
    aside — a kind is not a matter of who may see what, and on the dev collections counting only the kinds searched
    cost CISI 0.006 (bm25 nDCG@10 0.402 -> 0.396: its entities left the statistics) and moved nothing else
    (bench/RESULTS.md, 2026-12-07). `keep`: `q`'s own mask (`matching`), when it has no kinds."""
    return keep if q.kinds is None else cache.matching(replace(q, kinds=None))


def counted(cache: Slots, mask: Mask) -> Stats:
    """BM25's statistics within `mask` (`within`'s): kept with it until the next write (~0.3 ms at 1M)."""
    found = cache.kept.get(id(mask))
    out: Stats
    if found is not None and found[0] is mask:
        out = found[1]
        return out
    n = int(np.count_nonzero(mask))
    if n >= cache.live:  # every live slot: the context's own counts
        out = (cache.live, cache.total_length, None)
    else:
        out = (n, float(np.dot(cache.lengths[: mask.shape[0]], mask)), mask)
    _keep(cache, id(mask), (mask, out))
    return out


def _keep(cache: Slots, key: object, entry: tuple[object, ...]) -> None:
    if len(cache.kept) > 32:  # searches at other instants or selectors between two writes: a bounded few
        cache.kept.clear()
    cache.kept[key] = entry


def counts(cache: Slots, q: SearchQuery, now: datetime, stems: Sequence[str]) -> tuple[int, dict[str, int]]:
    """The documents `q` may see (`seen_by`) and how many of them hold each of `stems` (its scores' idf)."""
    n, _, mask = counted(cache, within(cache, q, now, seen_by(cache, q, cache.matching(q))))
    return n, {t: cache.df(t, mask) for t in stems}


def values_in(cache: Slots, q: SearchQuery, now: datetime, key: str, most: int) -> dict[str, int] | None:
    """`SearchIndex.values` in a context's copy (its lock held): the rows of the slots `q` may return, read once
    (a segment's from SQLite, a thousand at a time), each checked as a search's returns are (its range filters). A
    filter on one faceted key (a recall's names) starts from the slots that hold its values (`slots_holding`)."""
    held = slots_holding(cache, *next(iter(q.metadata.items()))) if len(q.metadata) == 1 else None
    if held is None:
        slots = np.flatnonzero(within(cache, q, now, cache.matching(q)))
    else:  # a faceted key: no mask as long as the context for a query's one-off names (a recall's)
        ok = cache.allowed(q, now)[held]
        if (kinds := cache.matching(replace(q, metadata={}))) is not None:  # the kinds' mask, kept till a write
            ok &= kinds[held]
        slots = held[ok]
    if slots.shape[0] > most:
        return None
    found: dict[str, int] = {}
    for at in range(0, slots.shape[0], 1000):
        for row in cache.row_list(slots[at : at + 1000].tolist()):
            if row is None or not visible(row.scopes, row.valid_from, row.valid_until, row.metadata, q, now):
                continue
            if isinstance(value := row.metadata.get(key), str):
                found[value] = found.get(value, 0) + 1
    return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))


def slots_holding(cache: Slots, key: str, want: Any) -> Array | None:
    """The slots (ascending) whose metadata `key` is one of `want` (a value or a list of them), from the values kept
    per slot in memory (`rows.faceted`) and a segment's rows through SQLite's index on `key`; None when `key` is not
    faceted or a value is not a string (then a mask, `Slots.matching`)."""
    values = frozenset(want) if isinstance(want, list | tuple) else frozenset([want])
    out = facet_slots(cache.facets, key, values)
    if out is None:
        return None
    if cache.base is not None and cache.read_metadata is not None:
        out = np.concatenate([cache.base.slots_of(key, values, cache.read_metadata, among), out])
    return out


def hits(ranked: Iterator[tuple[int, Row | None, float]], cache: Slots) -> Ranked:
    """The rows as a `Ranked` list: a hit is made only for the rows a search returns — a segment's rows read from
    SQLite then, a few at a time (one removed since it was ranked: its id, kind and scopes, no text)."""
    slots: list[int] = []
    rows: list[Row | None] = []
    scores: list[float] = []
    ids: list[str] = []
    base = cache.base
    for slot, row, score in ranked:
        slots.append(slot)
        rows.append(row)
        scores.append(score)
        ids.append(row.id if row is not None else base.ids[slot] if base is not None else "")

    def made(n: int) -> Hit:
        row = rows[n]
        if row is None:
            assert base is not None
            return Hit(ids[n], base.kind(slots[n]), scores[n], "", {}, base.tag_sets[int(base.tags[slots[n]])])
        return Hit(row.id, row.kind, scores[n], row.text, row.metadata, row.scopes)

    def read(ns: list[int]) -> None:
        wanted = [n for n in ns if rows[n] is None]
        for n, found in zip(wanted, cache.row_list([slots[n] for n in wanted]), strict=True):
            rows[n] = found

    def make(n: int) -> Hit:
        if rows[n] is None:
            read(list(range(n, min(len(rows), n + READ_AHEAD))))
        return made(n)

    def make_many(ns: list[int]) -> list[Hit]:
        read(ns)
        return [made(n) for n in ns]

    def values(key: str) -> list[Any]:
        wanted = [n for n, row in enumerate(rows) if row is None]
        found = dict(zip(wanted, values_of(cache, [slots[n] for n in wanted], key), strict=True)) if wanted else {}
        return [found[n] if row is None else row.metadata.get(key) for n, row in enumerate(rows)]

    return Ranked(ids, scores, make, make_many, values)


SAFE_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # a metadata key SQLite's JSON path names as it is, quoted


def values_of(cache: Slots, slots: list[int], key: str) -> list[Any]:
    """The metadata `key` of each of a segment's `slots` (None: it has none, or was removed since it was ranked, as its
    hit would say), read by SQLite's JSON functions — no row parsed — when the value is a string or absent; the rows
    themselves otherwise (a number, a flag, an odd key: the value their own parse gives)."""
    base = cache.base
    assert base is not None
    live = [s for s in slots if cache.tags[s] >= 0]
    found: dict[int, tuple[str, str | None, Any]] = {}
    if live and cache.read_values is not None and SAFE_KEY.fullmatch(key):
        found = cache.read_values([int(base.rowids[s]) for s in live], key)
    out: dict[int, Any] = {}
    whole: list[int] = []
    for s in live:
        got = found.get(int(base.rowids[s]))
        if got is not None and got[0] == base.ids[s] and got[1] in ("text", "null", None):
            out[s] = got[2]
        else:
            whole.append(s)
    for s, row in zip(whole, cache.row_list(whole), strict=True):
        out[s] = None if row is None else row.metadata.get(key)
    return [out.get(s) for s in slots]


def stems_held(cache: Slots, ids: Sequence[str], stems: Sequence[str]) -> dict[str, set[str]]:
    """The stems of `stems` each indexed document of `ids` holds, from the postings (no text tokenised again)."""
    known = {i: slot for i in ids if (slot := cache.pos.get(i)) is not None}
    slots = np.fromiter(known.values(), dtype=np.int64, count=len(known))
    held = {t: holding(cache, slots, t).tolist() for t in stems}
    return {i: {t for t in stems if held[t][n]} for n, i in enumerate(known)}


def holding(cache: Slots, slots: Array, term: str) -> Mask:
    """Which of `slots` hold `term` (a segment's posting searched once for all of them)."""
    out = np.zeros(slots.shape[0], dtype=bool)
    n = cache.base_n
    old = slots < n
    if cache.base is not None and old.any():
        posting, _ = cache.base.posting(term)
        wanted = slots[old]
        at = np.searchsorted(posting, wanted)
        found = np.zeros(wanted.shape[0], dtype=bool)
        inside = at < posting.shape[0]
        found[inside] = posting[at[inside]] == wanted[inside]
        out[old] = found & (cache.tags[wanted] >= 0)
    delta = cache.postings.get(term)
    if delta and (~old).any():
        out[~old] = [int(s) in delta for s in slots[~old]]
    return out


READ_AHEAD = 4  # a segment's rows read together when one hit is made alone (`make_many`: the ones a search returns)
