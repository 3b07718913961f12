"""Ranked lists of hits made lazily: an adapter that holds its rows hands a search's lists over as `Ranked` (ids and
scores, each hit made when first read), and the hybrid rules find a hit by its id among the lists (`Finder`), making
the ones a search returns together. Issue #26: 300 hits a recall were a tenth of its search."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, overload

from engram.kernel.ports import Hit


class Ranked(Sequence[Hit]):
    """A ranked list of hits, best first, each made when it is first read. A hybrid search fuses two lists of
    ~150 candidates by their ids and scores and returns k of them: an adapter that holds its rows (the
    embedded index) hands its lists over as this, and only the hits a search returns are ever made (issue #26:
    300 hits a recall were a tenth of its search)."""

    __slots__ = ("_made", "_make", "_make_many", "_values", "ids", "scores")

    def __init__(
        self,
        ids: list[str],
        scores: list[float],
        make: Callable[[int], Hit],
        make_many: Callable[[list[int]], list[Hit]] | None = None,
        values: Callable[[str], list[Any]] | None = None,
    ) -> None:
        self.ids, self.scores, self._make, self._make_many = ids, scores, make, make_many
        self._values = values
        self._made: dict[int, Hit] = {}

    def values(self, key: str) -> list[Any] | None:
        """Each hit's metadata `key` (None where it has none), in order, without making the hits (`values`: the
        adapter reads that one value of each row); None when the adapter cannot (then read the hits)."""
        if self._values is None:
            return None
        return self._values(key)

    def prepare(self, ns: Sequence[int]) -> None:
        """Make the hits at positions `ns` now, together (`make_many`: the adapter reads their rows at once)."""
        missing = [n for n in dict.fromkeys(ns) if n not in self._made and 0 <= n < len(self.ids)]
        if missing and self._make_many is not None:
            self._made.update(zip(missing, self._make_many(missing), strict=True))

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, j: int) -> Hit: ...
    @overload
    def __getitem__(self, j: slice) -> list[Hit]: ...
    def __getitem__(self, j: int | slice) -> Hit | list[Hit]:
        if isinstance(j, slice):
            return [self[n] for n in range(*j.indices(len(self.ids)))]
        n = j + len(self.ids) if j < 0 else j
        if not 0 <= n < len(self.ids):
            raise IndexError(j)
        return self._at(n)

    def __iter__(self) -> Iterator[Hit]:
        return map(self._at, range(len(self.ids)))

    def _at(self, n: int) -> Hit:
        made = self._made.get(n)
        if made is None:
            made = self._made[n] = self._make(n)
        return made

    def pairs(self) -> list[tuple[str, float]]:
        return list(zip(self.ids, self.scores, strict=True))


def ranked_pairs(hits: Sequence[Hit]) -> list[tuple[str, float]]:
    """(id, score) of each hit, in order, without making the hits of a `Ranked` list."""
    return hits.pairs() if isinstance(hits, Ranked) else [(h.id, h.score) for h in hits]


def ranked_ids(hits: Sequence[Hit]) -> list[str]:
    """The ids of the hits, in order, without making the hits of a `Ranked` list."""
    return hits.ids if isinstance(hits, Ranked) else [h.id for h in hits]


class Finder:
    """The hit of an id among `lists` (the last list's, when several have it: the same passage), made only
    when asked for (`Ranked`); `ahead` makes the hits of several ids together (one read of their rows)."""

    def __init__(self, *lists: Sequence[Hit]) -> None:
        self._where: dict[str, tuple[Sequence[Hit], int]] = {}
        for hits in lists:
            for n, i in enumerate(ranked_ids(hits)):
                self._where[i] = (hits, n)

    def __call__(self, i: str) -> Hit:
        hits, n = self._where[i]
        return hits[n]

    def ahead(self, ids: Iterable[str]) -> None:
        wanted: dict[int, tuple[Ranked, list[int]]] = {}
        for i in ids:
            hits, n = self._where[i]
            if isinstance(hits, Ranked):
                wanted.setdefault(id(hits), (hits, []))[1].append(n)
        for hits, ns in wanted.values():
            hits.prepare(ns)
