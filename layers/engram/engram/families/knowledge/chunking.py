"""Split parsed blocks into chunks: fixed token windows, sentences, paragraphs, or semantic
(paragraphs split where the topic shifts, by embedding similarity). Chunks never cross a section."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from engram.families.knowledge.parsing import Block
from engram.kernel.lazy import module
from engram.search.terms import approx_tokens

if TYPE_CHECKING:
    import numpy as np
else:
    np = module("numpy")

Strategy = Literal["fixed", "sentence", "paragraph", "semantic"]
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_PARAGRAPH = re.compile(r"\n\s*\n")
BALANCED = True  # an over-long paragraph split at sentences into even parts (issue #25)
SEMANTIC_BREAK = 0.35  # adjacent-sentence cosine below this starts a new chunk


@dataclass(frozen=True)
class Chunk:
    text: str
    section: str
    position: int
    page: int | None
    tokens: int


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(re.sub(r"[ \t]+", " ", text)) if s.strip()]


_ANY_END = re.compile(r"(?<=[.!?;])\s+")  # lower-cased or unpunctuated text: any end mark


def _sentences_of(text: str) -> list[str]:
    """A long paragraph's sentences: capitalised ones where it has them, else at any end mark."""
    found = sentences(text)
    return found if len(found) > 1 else [p for p in _ANY_END.split(text.strip()) if p]


def _windows(words: list[str], max_tokens: int, overlap: int) -> list[str]:
    # ~0.75 words a token: the same 4-characters-a-token rule as approx_tokens
    size = max(1, int(max_tokens * 0.75))
    step = max(1, size - int(overlap * 0.75))
    return [" ".join(words[i : i + size]) for i in range(0, max(1, len(words) - (size - step)), step)]


def _pack(units: Sequence[str], max_tokens: int, overlap: int, target: int | None = None) -> list[str]:
    """Greedily pack units up to `target` tokens (max_tokens unless given); carry the last units (up to
    `overlap` tokens) over. A unit longer than max_tokens is split at its sentences into parts of even
    size (a window only where one sentence alone is too long): a chunk ends where a sentence does, and a
    paragraph just over the limit becomes two halves, not a chunk and a scrap."""
    limit = target or max_tokens
    out: list[str] = []
    current: list[str] = []
    for unit in units:
        size = approx_tokens(unit)
        if size > max_tokens:  # one unit alone is too long
            if current:
                out.append(" ".join(current))
                current = []
            parts = _sentences_of(unit) if target is None and BALANCED else [unit]
            if len(parts) > 1:
                even = -(-size // -(-size // max_tokens))  # the size of each of the fewest parts that fit
                out += _pack(parts, max_tokens, overlap, min(max_tokens, even + overlap))
            else:
                out += _windows(unit.split(), max_tokens, overlap)
            continue
        if current and approx_tokens(" ".join([*current, unit])) > limit:
            out.append(" ".join(current))
            carry: list[str] = []
            for prev in reversed(current):
                if approx_tokens(" ".join([prev, *carry])) > overlap:
                    break
                carry.insert(0, prev)
            current = carry
        current.append(unit)
    if current:
        out.append(" ".join(current))
    return out


def _bounded(parts: list[str], max_tokens: int) -> list[str]:
    """Text without spaces to split at (a base64 blob, a megabyte of one word) still makes chunks of a chunk's
    size: a part over twice the limit is cut into pieces of it (what a store holds in one item, what the
    model reads, are bounded whatever the text)."""
    width = max_tokens * 4  # approx_tokens' characters a token
    out: list[str] = []
    for part in parts:
        if approx_tokens(part) <= 2 * max_tokens:
            out.append(part)
        else:
            out += [part[i : i + width] for i in range(0, len(part), width)]
    return out


def chunk(
    blocks: Sequence[Block],
    strategy: Strategy = "paragraph",
    max_tokens: int = 256,
    overlap: int = 32,
    embed: Callable[[list[str]], np.ndarray] | None = None,
) -> list[Chunk]:
    overlap = min(overlap, max_tokens // 2)
    texts: list[tuple[str, Block]] = []
    for block in blocks:
        if strategy == "fixed":
            parts = _windows(block.text.split(), max_tokens, overlap)
        elif strategy == "sentence":
            parts = _pack(sentences(block.text), max_tokens, overlap)
        elif strategy == "semantic" and embed is not None:
            parts = _semantic(block.text, max_tokens, overlap, embed)
        else:
            paras = [" ".join(p.split()) for p in _PARAGRAPH.split(block.text) if p.strip()]
            parts = _pack(paras, max_tokens, overlap)
        texts += [(p, block) for p in _bounded(parts, max_tokens) if p.strip()]
    return [Chunk(t, b.section, i, b.page, approx_tokens(t)) for i, (t, b) in enumerate(texts)]


def _semantic(text: str, max_tokens: int, overlap: int, embed: Callable[[list[str]], np.ndarray]) -> list[str]:
    sents = sentences(text)
    if len(sents) < 3:
        return _pack(sents, max_tokens, overlap)
    vecs = embed(sents)
    groups: list[list[str]] = [[sents[0]]]
    for i in range(1, len(sents)):
        if float(vecs[i] @ vecs[i - 1]) < SEMANTIC_BREAK:
            groups.append([])
        groups[-1].append(sents[i])
    return [piece for g in groups for piece in _pack(g, max_tokens, 0)]
