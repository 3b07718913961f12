"""The memory family's reads: recall (hybrid, by time and scope) and the profile."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engram.families.memory.base import CATEGORY_SECTION, MemoryBase
from engram.families.memory.named import search_named, sessions_ahead
from engram.families.memory.plan import index_doc_of
from engram.families.memory.results import format_context, hit_dict
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, parse_time
from engram.kernel.load import give_way
from engram.kernel.ports import (
    Hit,
    Item,
    SearchMode,
    SearchQuery,
    scan,
)
from engram.search.rules import query_vector
from engram.search.time_phrases import Window, preferred, said_in, window_of

# A time the query's words name is a preference (`Window.soft`, `engram.search.time_phrases.preferred`): among the best
# TIME_POOL * k hits, those said within it or up to `time_phrases.LAG` after it rank first (the others' scores
# divided by 1 + `time_phrases.BOOST`), and the words stay in the query searched (a turn that says "last week" or
# "in June" matches them). Chosen on LoCoMo's conversations 0-6, checked on 7-9 (bench/locomo_time.py, RESULTS).
TIME_POOL = 2
TIME_KEEP_WORDS = True


class Reading(MemoryBase):
    def recall(
        self,
        caller: Caller,
        query: str,
        k: int = 10,
        lens: list[list[str]] | None = None,
        as_of: datetime | None = None,
        mode: SearchMode = "hybrid",
        kinds: Sequence[str] | None = None,
        extra_visibility: list[list[str]] | None = None,
        everything_when_small: bool = True,
        window: Window | None = None,
    ) -> dict[str, Any]:
        """`everything_when_small`: when the context holds no more than `k` memories, answer all of them in
        time order (the `full_context` tier: nothing can be missed); off, a search ranks them as always.
        `window`: only what was said within it (`said_at`)."""
        started = self.clock_ms()
        visibility = self.identity.read_lens(caller, lens)
        if extra_visibility is not None:
            visibility = [sorted(set(a) | set(b)) for a in visibility for b in extra_visibility]
        kinds = tuple(kinds) if kinds else ("turn", "attribute")
        # The cache is keyed by the index's generation of the context, which every writer moves (another
        # process on the same data folder too); an index that has none (OpenSearch) caches nothing.
        generation = self.index.generation(caller.context_id)
        key = (
            caller.context_id,
            generation,
            tuple(map(tuple, visibility)),
            " ".join(query.lower().split()),
            k,
            iso(as_of),
            mode,
            kinds,
            everything_when_small,
            (window.bounds(), window.soft) if window is not None else None,
        )
        # An answer holding a memory that expires is good only until the first of them does: an expired
        # memory is never recalled, even before the sweep that removes it moves the generation.
        now = self.clock.now()
        with self._lock:
            entry = self._cache.get(key) if generation is not None else None
            cached = entry[0] if entry is not None and (entry[1] is None or now < entry[1]) else None
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is not None:
            return dict(cached, tier="cache", queryMs=self.clock_ms() - started)
        total = self.index.count(caller.context_id)
        hard = window is not None and not window.soft
        small = total <= k and everything_when_small and not hard
        # the sessions of the people the query names, looked up while the query is embedded (`named`)
        look = None if small else sessions_ahead(self.index, SearchQuery(caller.context_id, query, None, mode, k,
                                                 kinds, visibility, as_of), now)  # fmt: skip
        vec = query_vector(self.embedder, query, ranks=mode != "bm25")  # bm25 too: scores weigh both evidences
        ranges = {"said_at": window.bounds()} if window is not None and hard else {}
        if small:
            if vec is not None:
                hits = self.index.search(
                    SearchQuery(caller.context_id, query, vec, "vector", k, kinds, visibility, as_of), self.clock.now()
                )
            else:  # no embedder: BM25 would drop what shares no word with the query, so list the records
                hits = self._listing(caller, kinds, visibility, as_of or self.clock.now())
            hits.sort(key=lambda h: (str(h.metadata.get("said_at", "")), h.id))
            if window is not None:  # all of them still, those said in the time the query names first
                hits.sort(key=lambda h: not said_in(h, window, "said_at"))
            tier = "full_context"
        else:
            pool = k if window is None or hard else max(TIME_POOL * k, 30)
            q = SearchQuery(caller.context_id, query, vec, mode, pool, kinds, visibility, as_of, ranges=ranges)
            assert look is not None
            hits = search_named(self.index, q, self.clock.now(), look.result())  # their sessions first
            if window is not None and not hard:
                hits = preferred(hits, window, k, "said_at")
            tier = "direct" if hits and hits[0].kind == "attribute" else "hybrid"
        give_way()  # (engram.kernel.load: no lock held)
        result = {"context": format_context(hits), "results": [hit_dict(h) for h in hits], "tier": tier}
        expiring = [
            t for t in (parse_time(str(h.metadata.get("expires_at") or "") or None) for h in hits) if t is not None
        ]
        with self._lock:
            if generation is not None:
                self._cache[key] = (result, min(expiring, default=None))
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return dict(result, queryMs=self.clock_ms() - started)

    def _listing(self, caller: Caller, kinds: Sequence[str], visibility: list[list[str]], at: datetime) -> list[Hit]:
        """Every visible turn and attribute valid at `at`, as search hits (score 1)."""
        from engram.kernel.scopes import can_see
        from engram.search.filters import valid_at

        hits: list[Hit] = []
        for kind in kinds:
            for item in scan(self.records, caller.context_id, kind):
                if not can_see(item.data["scopes"], visibility):
                    continue
                doc = index_doc_of(item)
                if not valid_at(doc.valid_from, doc.valid_until, at):  # a turn's end: when it expires
                    continue
                hits.append(Hit(item.id, kind, 1.0, doc.text, doc.metadata, doc.scopes))
        return hits

    def clock_ms(self) -> float:
        return round(time.perf_counter() * 1000, 3)

    def current_attributes(self, caller: Caller, visibility: list[list[str]]) -> list[Item]:
        from engram.kernel.scopes import can_see

        items = scan(self.records, caller.context_id, "attribute")
        return [i for i in items if i.data.get("valid_until") is None and can_see(i.data["scopes"], visibility)]

    def recall_said(
        self,
        caller: Caller,
        query: str,
        *,
        k: int,
        lens: list[list[str]] | None,
        as_of: datetime | None,
        mode: SearchMode,
        since: datetime | None = None,
        until: datetime | None = None,
        timezone: str | None = None,
    ) -> dict[str, Any]:
        """`recall` of what was said when the query's time words (or `since` / `until`) say, in the caller's time
        zone: the result says how it read them (`time`)."""
        rest, window = window_of(query, self.clock.now(), timezone, since, until, lambda key: self.began(caller, key))
        searched = query if window is not None and window.soft and TIME_KEEP_WORDS else rest
        found = self.recall(caller, searched, k, lens, as_of, mode, window=window)
        return found if window is None else dict(found, time=window.said())

    def began(self, caller: Caller, key: str) -> datetime | None:
        """When the caller's latest change of a fact began ("before I moved": the current location's start)."""
        from engram.kernel.scopes import can_see

        lens = self.identity.read_lens(caller, None)
        changes = [
            i.data["valid_from"]
            for i in scan(self.records, caller.context_id, "attribute")
            if i.data["key"] == key and i.data.get("supersedes") and can_see(i.data["scopes"], lens)
        ]
        return parse_time(max(changes)) if changes else None

    def timeline(self, caller: Caller, subject: str | None, key: str | None, limit: int) -> dict[str, Any]:
        """Every fact the caller may see, current or not, with its validity window, newest first: what was true
        when, and which turn said it (its text, when the caller may see the turn)."""
        from engram.kernel.scopes import can_see

        lens = self.identity.read_lens(caller, None)
        items = [i for i in scan(self.records, caller.context_id, "attribute") if can_see(i.data["scopes"], lens)
                 and (subject is None or i.data["subject"].lower() == subject.lower())
                 and (key is None or i.data["key"] == key)]  # fmt: skip
        items.sort(key=lambda i: (i.data["valid_from"], i.id), reverse=True)
        page = items[:limit]
        turns = self.records.get_many(caller.context_id, "turn", sorted({i.data["source_turn"] for i in page}))
        facts = []
        for i in page:
            d, turn = i.data, turns.get(i.data["source_turn"])
            said = turn.data["content"] if turn is not None and can_see(turn.data["scopes"], lens) else None
            facts.append({"id": i.id, "subject": d["subject"], "key": d["key"], "value": d["value"],
                          "category": d["category"], "valid_from": d["valid_from"], "valid_until": d["valid_until"],
                          "status": d.get("status", "current"), "recorded_at": d["recorded_at"],
                          "source_turn": d["source_turn"], "said": said})  # fmt: skip
        return {"facts": facts, "total": len(items)}

    def profile(self, caller: Caller, scopes: list[list[str]] | None) -> dict[str, Any]:
        visibility = self.identity.read_lens(caller, scopes)
        sections: dict[str, list[dict[str, Any]]] = {
            "static": [],
            "dynamic": [],
            "preferences": [],
            "instructions": [],
            "experiential": [],
        }
        for item in self.current_attributes(caller, visibility):
            d = item.data
            if d["category"] == "instruction":
                sections["instructions"].append({"label": d["key"].split(":", 1)[1], "description": d["value"]})
            else:
                section = CATEGORY_SECTION.get(d["category"], "experiential")
                sections[section].append(
                    {"key": d["key"], "value": d["value"], "subject": d["subject"], "since": d["valid_from"]}
                )
        return sections
