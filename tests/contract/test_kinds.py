"""Kinds enforced at run time (issue #24), on both adapter sets: whatever adapter the composition root picked,
a write of an undeclared kind, or of a scoped kind without scopes, is refused before it reaches the store,
and so is such a document for the search index. (Before, only a test looked at `engram.kernel.kinds`.)"""

from __future__ import annotations

import pytest

from engram.kernel.clock import SystemClock
from engram.kernel.kinds import KINDS, UndeclaredKind
from engram.kernel.ports import IndexDoc, Write
from engram.wiring import Engram


def test_undeclared_kinds_and_scoped_kinds_without_scopes_are_refused(both: Engram) -> None:
    e, now = both, SystemClock().now()
    for bad in (
        Write("acme", "gossip", "g1", {"scopes": ["org/acme"]}, "t"),  # undeclared
        Write("acme", "document", "d1", {"title": "no scopes"}, "t"),  # scoped, without them
        Write("acme", "message", "m1", {"scopes": []}, "t"),
    ):
        with pytest.raises(UndeclaredKind):
            e.records.transact([Write("acme", "fence", "ok", {}, "t"), bad], now)
    assert e.records.get("acme", "fence", "ok") is None  # refused whole: nothing of the transaction was written
    for doc in (
        IndexDoc("acme", "gossip", "g1", "text", None, ["org/acme"]),
        IndexDoc("acme", "chunk", "c1", "text", None, []),
        IndexDoc("acme", "schema", "s1", "text", None, ["org/acme"]),  # a record kind, never indexed
    ):
        with pytest.raises(UndeclaredKind):
            e.index.upsert([doc])
    # what is declared goes through: a via kind without scopes, a scoped kind with them, a removal
    e.records.transact([Write("acme", "chunk", "c1", {"text": "x"}, "t"),
                        Write("acme", "document", "d1", {"scopes": ["org/acme"]}, "t")], now)  # fmt: skip
    assert e.records.get("acme", "document", "d1") is not None
    e.index.upsert([IndexDoc("acme", "chunk", "c1", "text", None, ["org/acme"])])
    assert {"entity", "gmention", "grelev", "gsource", "wchunk"} <= set(KINDS)
