"""The query-vector cache (engram.search.query_vectors): a query embedded once is answered from memory, with the
same vector; what is not a single short query passes through; erasure empties it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engram.search.query_vectors import MAX_CHARS, QueryVectors


class Counting:
    model_id, dim = "counting", 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.asarray([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)


def test_a_repeated_query_is_embedded_once_and_answers_the_same_vector() -> None:
    inner = Counting()
    cache = QueryVectors(inner)
    first = cache.embed(["when did she move?"])
    first[0, 0] = 99.0  # a caller that writes into its vector does not change what is kept
    again = cache.embed(["when did she move?"])
    assert inner.calls == [["when did she move?"]]
    assert again.shape == (1, 3) and again.dtype == np.float32
    assert again.tolist() == [[18.0, 1.0, 0.0]]


def test_batches_and_long_texts_pass_through_and_are_not_kept() -> None:
    inner = Counting()
    cache = QueryVectors(inner)
    cache.embed(["a", "b"])
    cache.embed(["a", "b"])
    long = "x" * (MAX_CHARS + 1)
    cache.embed([long])
    cache.embed([long])
    assert inner.calls == [["a", "b"], ["a", "b"], [long], [long]]


def test_the_most_recent_are_kept_and_forget_drops_them() -> None:
    inner = Counting()
    cache = QueryVectors(inner, keep=2)
    for text in ("q1", "q2", "q1", "q3"):  # q1 used again: q2 is the oldest when q3 comes
        cache.embed([text])
    assert inner.calls == [["q1"], ["q2"], ["q3"]]
    cache.embed(["q1"])
    cache.embed(["q2"])
    assert inner.calls[-1] == ["q2"] and len(inner.calls) == 4
    cache.forget()
    cache.embed(["q1"])
    assert inner.calls[-1] == ["q1"] and len(inner.calls) == 5
    assert cache.model_id == "counting" and cache.dim == 3


def test_an_erasure_empties_the_kept_query_vectors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A kept query may have held the subject's words: an erasure ends with none kept."""
    from engram.families.memory.base import Turn
    from engram.settings import Settings
    from engram.wiring import build
    from tests.contract.conftest import ALICE, two_agents
    from tests.contract.test_erasure import management

    inner = Counting()
    e = build(Settings(data_dir=tmp_path, queue_worker=False), embedder=inner)
    alice, _ = two_agents(e)
    e.memory.store(alice, Turn("I live in Lisbon.", session_id="s"), [[ALICE]])
    e.memory.recall(alice, "where does alice live", everything_when_small=False)
    e.memory.recall(alice, "where does alice live?", everything_when_small=False)
    asked = len(inner.calls)
    e.memory.recall(alice, "where does alice live", everything_when_small=False, mode="bm25")
    assert len(inner.calls) == asked  # kept: not embedded again
    admin = management(e)
    e.erasure.request(admin, e.erasure.subject(admin, ALICE, None), preview=False)
    e.queue.join()
    e.memory.recall(alice, "where does alice live", everything_when_small=False, mode="bm25")
    assert inner.calls[-1] == ["where does alice live"]  # embedded anew (the erasure embeds its own searches)
    assert inner.calls.count(["where does alice live"]) == 2
