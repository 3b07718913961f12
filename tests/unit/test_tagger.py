"""The learned extractor (#50): BILOU decoding, pieces gathered into words, and the shipped weights on the
product's own encoder pass."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from engram.families.entities import tagger as tg


def test_viterbi_never_opens_a_name_it_does_not_close() -> None:
    logp = np.full((3, len(tg.LABELS)), -5.0)
    logp[0, tg.LABELS.index("B-Peop")] = 0.0  # the best tag per word alone: B, B, O (not a valid sequence)
    logp[1, tg.LABELS.index("B-Org")] = 0.0
    logp[2, tg.LABELS.index("O")] = 0.0
    tags = [tg.LABELS[i] for i in tg.viterbi(logp)]
    assert all(tg._allowed(a, b) for a, b in pairwise(tags))
    assert tags[-1] == "O" or tags[-1][0] in "LU"
    assert tg.spans_of(["B-Peop", "L-Peop", "O", "U-Loc"]) == [tg.Span(0, 2, "Peop"), tg.Span(3, 4, "Loc")]


def test_pieces_are_gathered_into_the_words_they_spell() -> None:
    text = "Acme's CEO"
    words = ["Acme", "'s", "CEO"]
    spans = tg.align(text, words)
    assert spans == [(0, 4), (4, 6), (7, 10)]
    offsets = [(0, 0), (0, 2), (2, 4), (4, 5), (5, 6), (7, 10), (0, 0)]  # [CLS] ac ##me ' s ceo [SEP]
    pieces = np.arange(7, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    states = tg.word_states(pieces, offsets, spans)
    assert states[:, 0].tolist() == [1.0, 3.0, 5.0]  # first piece
    assert states[:, 2].tolist() == [1.5, 3.5, 5.0]  # mean of the pieces


@pytest.fixture(scope="module")
def extractor() -> tg.Extractor:
    shipped = tg.shipped()
    assert shipped is not None, "the weights ship in the package (make train-extractor)"
    return shipped


def test_the_shipped_extractor_reads_a_cortex_sentence(extractor: tg.Extractor) -> None:
    from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder

    text = "Jane Smith is a software engineer at Acme Corporation in Boston."
    _, [(offsets, pieces)] = OnnxMiniLMEmbedder().embed_with_states([text])
    words, spans, links = tg.read_text(extractor, text, offsets, pieces)
    named = {(" ".join(words[s.start : s.end]), s.type) for s in spans}
    assert {("Jane Smith", "Peop"), ("Acme Corporation", "Org"), ("Boston", "Loc")} <= named
    said = {(" ".join(words[k.head.start : k.head.end]), k.relation, " ".join(words[k.tail.start : k.tail.end]))
            for k in links}  # fmt: skip
    assert ("Jane Smith", "works_at", "Acme Corporation") in said
    assert not any(k.relation == "killed" for k in links)


def test_the_fused_head_is_the_ensemble_it_folds() -> None:
    """Standardisation folded in, members side by side, second layers block-diagonal: the same log-probabilities
    as each member's `mlp_logp`, averaged; and a full-rank basis changes nothing."""
    rng = np.random.default_rng(7)
    members = [
        {"mu": rng.normal(size=12), "sd": rng.uniform(0.5, 2, 12), "w1": rng.normal(size=(12, 5)),
         "b1": rng.normal(size=5), "w2": rng.normal(size=(5, 4)), "b2": rng.normal(size=4)}
        for _ in range(3)
    ]  # fmt: skip
    x = rng.normal(size=(6, 12)).astype(np.float32)
    want = np.mean([tg.mlp_logp(m, x) for m in members], axis=0)
    assert np.allclose(tg.Fused(members)(x), want, atol=1e-4)
    basis = np.linalg.qr(rng.normal(size=(15, 15)))[0]
    assert np.allclose(tg.Fused(members, basis)(x), want, atol=1e-4)
    assert not np.allclose(tg.Fused(members, basis[:, :2])(x), want, atol=1e-2)  # a rank-2 basis loses something


def test_the_shipped_head_runs_through_its_basis(extractor: tg.Extractor) -> None:
    assert "tag_proj" in extractor.weights()
    assert extractor.weights()["tag_proj"].shape[1] < extractor.weights()["tag_proj"].shape[0]


@pytest.mark.parametrize(
    ("words", "span", "kept"),
    [
        (["Thanks", ",", "Evan", "!"], (0, 3), (2, 3)),  # an opener and its comma off the front
        (["Hey", "Jolene", "!"], (0, 2), (1, 2)),
        (["I've", "never"], (0, 1), None),  # a contraction is no name
        (["Thanks", "!"], (0, 1), None),
        (["If", "I"], (0, 2), None),
        (["Mental", "health", "matters"], (0, 2), None),  # a sentence's capital
        (["in", "Rio", "de", "Janeiro"], (1, 4), (1, 4)),  # a name's own connector stays
        (["the", "river"], (0, 2), None),
        (["J.K.", "Rowling"], (0, 2), (0, 2)),
    ],
)
def test_chat_openers_and_function_words_are_not_names(
    words: list[str], span: tuple[int, int], kept: tuple[int, int] | None
) -> None:
    got = tg.trimmed(words, tg.Span(*span, "Peop"))
    assert (None if got is None else (got.start, got.end)) == kept


def test_a_word_whose_pieces_an_empty_one_splits_is_their_mean() -> None:
    pieces = np.arange(12, dtype=np.float32).reshape(6, 2)
    offsets = [(0, 0), (0, 2), (2, 2), (2, 4), (5, 7), (0, 0)]  # [CLS] ab <empty> cd ef [SEP]
    states = tg.word_states(pieces, offsets, [(0, 4), (5, 7)])
    assert states.tolist() == [[2.0, 3.0, 4.0, 5.0], [8.0, 9.0, 8.0, 9.0]]
