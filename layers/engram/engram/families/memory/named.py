"""Who a question names: the words of a query that may be a speaker's name (`speaker` in a turn's metadata), and the
sessions those speakers speak in — what a recall searches first (#54). With many other memories in the same scopes
(a year of a team's conversations, documents' sentences), a question about Caroline is answered from the sessions
Caroline speaks in — the other speakers' turns in them too — before everything else.

Chosen on LoCoMo's conversations 0-6, checked on 7-9 and on the needle (`bench/needle.py`, RESULTS): searching only the
named speaker's own turns loses what the others told them (0.618 against 0.726 alone); their sessions keep it."""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

from engram.kernel.ports import Hit, SearchIndex, SearchQuery

NARROW = True  # off: a recall searches the whole context (the benches' other arm)
NAMES = 48  # the most forms of a question's words tried as a name (each word as written and capitalised, each pair)
MOST = 5_000  # a named speaker's turns read to find their sessions; beyond it (one speaker says most of the
# context: narrowing by them keeps almost everything) the recall is not narrowed
_WORD = re.compile(r"[^\W\d_][\w'’-]*")


def names_in(query: str) -> list[str]:
    """The forms of `query`'s words a speaker's name may take: each word (a possessive's 's dropped) as written and
    capitalised, and each two words in a row ("Mary Jane")."""
    words = [re.sub(r"['’]s$", "", w).rstrip("'’-") for w in _WORD.findall(query)]
    words = [w for w in words if len(w) > 1]
    forms: dict[str, None] = {}
    for n, word in enumerate(words):
        forms[word] = forms[word[0].upper() + word[1:]] = None
        if n:
            forms[f"{words[n - 1]} {word}"] = None
    return list(forms)[:NAMES]


def sessions_named(index: SearchIndex, q: SearchQuery, now: datetime) -> list[str]:
    """The sessions in which the speakers `q`'s text names have a turn `q` may see (its scopes and instant), or none
    (nobody named, or a named speaker has more than `MOST` turns)."""
    names = names_in(q.text) if NARROW else []
    if not names:
        return []
    turns = SearchQuery(q.context_id, kinds=("turn",), visibility=q.visibility, as_of=q.as_of)
    found = index.values(replace(turns, metadata={"speaker": names}), "session_id", now, MOST)
    return sorted(found or ())


def sessions_ahead(index: SearchIndex, q: SearchQuery, now: datetime) -> Future[list[str]]:
    """`sessions_named` in a helper thread: started before the query is embedded, so that the look (one more request
    on OpenSearch, ~7 ms on the local node) is under way while the model runs."""
    return _POOL.submit(sessions_named, index, q, now)


_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="engram-named")  # its threads start with the first look


def search_named(index: SearchIndex, q: SearchQuery, now: datetime, sessions: list[str] | None = None) -> list[Hit]:
    """`q`'s hits, those of the sessions its text names first (`sessions_named`, or `sessions` when already known);
    the rest of the context's after them when those sessions hold fewer than `q.k`. A speaker the caller cannot see
    narrows nothing: the sessions are those of the turns `q` may return."""
    if sessions is None:
        sessions = sessions_named(index, q, now)
    if not sessions:
        return index.search(q, now)
    first = index.search(replace(q, metadata={**q.metadata, "session_id": sessions}), now)
    if len(first) >= q.k:
        return first
    seen = {h.id for h in first}
    return first + [h for h in index.search(q, now) if h.id not in seen][: q.k - len(first)]
