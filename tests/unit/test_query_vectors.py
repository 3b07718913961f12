"""The query-vector cache (engram.query_vectors): a query embedded once is answered from memory, with the
same vector; what is not a single short query passes through; erasure empties it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engram.query_vectors import MAX_CHARS, QueryVectors


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
