"""Kinds enforced at run time (issue #24), on both adapter sets: whatever adapter the composition root picked,
a write of an undeclared kind, or of a scoped kind without scopes, is refused before it reaches the store,
and so is such a document for the search index. (Before, only a test looked at `engram.kernel.kinds`.)"""

from __future__ import annotations

import pytest

from engram.kernel.clock import SystemClock
from engram.kernel.kinds import KERNEL_KINDS, Kind, Kinds, UndeclaredKind
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
    assert {"entity", "gmention", "grelev", "gsource", "wchunk"} <= set(e.kinds)
    assert set(KERNEL_KINDS) <= set(e.kinds)


def test_the_catalogue_of_kinds_is_made_once_and_refuses_one_declared_twice_otherwise() -> None:
    """#55: no module-level table the families write into as they load — the composition root makes a `Kinds` from
    the kernel's and the families' declarations; a kind two of them declare differently is refused there."""
    a, b = Kind("memory", "scoped", indexed=True), Kind("knowledge", "scoped")
    assert Kinds({"note": a}, {"note": a})["note"] is a  # the same declaration twice: one kind
    with pytest.raises(ValueError, match="declared twice"):
        Kinds({"note": a}, {"note": b})
    with pytest.raises(ValueError, match="declared twice"):
        Kinds({"key": b})  # the kernel's own
    assert "note" not in Kinds() and set(Kinds()) == set(KERNEL_KINDS)
