"""The learned extractor (#50): names and the relations between them, read from the token states of the encoder
pass Engram already makes over a text to embed it (no second pass). Pure numpy; the weights ship in the package
(`engram/data/extractor.npz`) and `make train-extractor` (`infra/extractor/train.py`) rebuilds them from CoNLL04's train
split.

A word is described by MiniLM's states of its word pieces — the last layer's and the third's (an earlier layer
keeps more of the word itself), its first piece and the mean of its pieces — its neighbours' states, and what the
model cannot see because it lowercases: capitals, word shape, where the word stands in a run of capitalised words,
a hashed suffix, and the gazetteers' marks. An ensemble of one-hidden-layer heads scores BILOU tags of Person /
Organization / Location per word; Viterbi decodes the best sequence BILOU allows. A pair of names of the types a
relation joins is described by the two names' mean states, the words between them (their mean state and a hashed
bag), both types, their distance and order; one hidden layer scores the relation (or none).

Hand-written, and why: the heads' forward pass and a first-order Viterbi are a few lines of numpy; a registry
package that does them (a CRF or deep-learning framework) would bring a large dependency into every function for
two matrix products."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from engram.families.entities import graph_names as gn
from engram.search.terms import STOP_WORDS

WEIGHTS = "data/extractor.npz"
TYPES = ("Peop", "Org", "Loc")  # CoNLL04's names; the graph's are `KINDS`
KINDS = {"Peop": gn.PERSON, "Org": gn.ORG, "Loc": gn.PLACE}
LABELS = ["O"] + [f"{p}-{t}" for t in TYPES for p in "BILU"]
# relation -> (head type, tail type); the graph's names of CoNLL04's relations
RELATIONS = {"works_at": ("Peop", "Org"), "killed": ("Peop", "Peop"), "based_in": ("Org", "Loc"),
             "lives_in": ("Peop", "Loc"), "located_in": ("Loc", "Loc")}  # fmt: skip
REL_LABELS = ["none", *RELATIONS]
SUFFIX_BINS, BETWEEN_BINS = 64, 128
DISTANCES = (0, 1, 2, 4, 7, 12)  # words between two names: bucket edges
LAYERS = 2  # states per piece: the last layer's, then the third's


@dataclass(frozen=True)
class Span:
    start: int  # word positions: [start, end)
    end: int
    type: str  # Peop / Org / Loc


@dataclass(frozen=True)
class Link:
    head: Span
    relation: str
    tail: Span
    score: float


# -- words and their states ------------------------------------------------------------------------------------


def word_states(pieces: np.ndarray, offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per word: [first piece, mean of its pieces] of each layer, from `pieces` (pieces x layers*hidden) whose
    character `offsets` fall in the word's character span (pieces of no word, e.g. [CLS], are skipped). A word
    with no piece (truncated away) is zeros."""
    n, width = len(spans), pieces.shape[1]
    out = np.zeros((n, 2 * width), dtype=np.float32)
    starts = [s for s, _ in spans]
    owner: dict[int, list[int]] = {}
    w = 0
    for i, (a, b) in enumerate(offsets):
        if b <= a:
            continue
        while w + 1 < n and starts[w + 1] <= a:
            w += 1
        if n and spans[w][0] <= a < max(spans[w][1], spans[w][0] + 1):
            owner.setdefault(w, []).append(i)
    if owner:  # a few vector adds for all words at once (a mean per word cost ~0.3 ms a turn); the same order
        # of adds as numpy's mean, so the same float32 states as the weights were trained on
        rows = np.fromiter(owner, dtype=np.intp, count=len(owner))
        counts = np.fromiter((len(idx) for idx in owner.values()), dtype=np.intp, count=len(owner))
        at = np.fromiter((idx[0] for idx in owner.values()), dtype=np.intp, count=len(owner))
        out[rows, :width] = pieces[at]
        total = pieces[at].copy()
        for j in range(1, int(counts.max())):
            more = counts > j
            total[more] += pieces[at[more] + j]
        out[rows, width:] = total / counts[:, None].astype(np.float32)
        for w, idx in owner.items():  # pieces that do not stand together (an empty one between): their own mean
            if idx[-1] - idx[0] != len(idx) - 1:
                out[w, width:] = pieces[idx].mean(0)
    return out


def align(text: str, words: Sequence[str]) -> list[tuple[int, int]]:
    """The character span of each word in `text`, found in order (a word not found takes an empty span where
    the search stands)."""
    out, at = [], 0
    for word in words:
        i = text.find(word, at)
        if i < 0:
            out.append((at, at))
            continue
        out.append((i, i + len(word)))
        at = i + len(word)
    return out


def _shape(words: Sequence[str]) -> np.ndarray:
    names, places = gn.first_names(), gn.places()
    rows = []
    for i, w in enumerate(words):
        low, prev = w.lower(), (words[i - 1] if i else "")
        nxt = words[i + 1] if i + 1 < len(words) else ""
        rows.append([w[:1].isupper(), w.isupper() and len(w) > 1, any(c.isdigit() for c in w), not w[:1].isalnum(),
                     i == 0, prev[:1].isupper(), nxt[:1].isupper(), low in names, low in places,
                     low.rstrip(".") in gn.ORG_WORDS, prev.lower().rstrip(".") in gn.TITLES,
                     low.rstrip(".") in gn.TITLES, len(w) <= 3, w.endswith("."),
                     prev.lower() in ("in", "at", "of", "from", "to"), prev.lower() == "the"])  # fmt: skip
    return np.array(rows, dtype=np.float32).reshape(len(words), 16)


def _runs(words: Sequence[str]) -> np.ndarray:
    """Where a word stands in its run of capitalised words, and a hashed suffix."""
    cap = [w[:1].isupper() for w in words]
    out = np.zeros((len(words), 6 + SUFFIX_BINS), dtype=np.float32)
    for i, w in enumerate(words):
        j = i
        while j > 0 and cap[j - 1]:
            j -= 1
        k = i
        while k + 1 < len(words) and cap[k + 1]:
            k += 1
        length = k - j + 1 if cap[i] else 0
        out[i, :6] = [length == 1, length == 2, length >= 3, cap[i] and i == j, cap[i] and i == k,
                      w.isalpha() and w.islower()]  # fmt: skip
        out[i, 6 + zlib.crc32(w[-3:].lower().encode()) % SUFFIX_BINS] = 1.0
    return out


def word_features(words: Sequence[str], states: np.ndarray) -> np.ndarray:
    """The tagger's input: `states` (words x 2*layers*hidden, from `word_states`) with the neighbours' last-layer
    first pieces, the shape marks and the runs."""
    hidden = states.shape[1] // (2 * LAYERS)
    last = states[:, :hidden]
    zero = np.zeros((1, hidden), np.float32)
    prev = np.vstack([zero, last[:-1]]) if len(words) else last
    nxt = np.vstack([last[1:], zero]) if len(words) else last
    return np.hstack([states, prev, nxt, _shape(words), _runs(words)]).astype(np.float32)


# -- the heads -----------------------------------------------------------------------------------------------------


def mlp_logp(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Log-probabilities of one hidden layer's softmax over standardised `x`."""
    h = np.maximum(((x - params["mu"]) / params["sd"]) @ params["w1"] + params["b1"], 0)
    z = h @ params["w2"] + params["b2"]
    z = z - z.max(1, keepdims=True)
    return np.asarray(z - np.log(np.exp(z).sum(1, keepdims=True)), dtype=np.float32)


class Fused:
    """An ensemble of `mlp_logp` heads over the same standardised input, run as one: the standardisation folded
    into the first layer, the members' first layers side by side (optionally through `proj`, a low-rank basis of
    their pre-activations chosen on train data: x @ (W proj) @ proj.T), their second layers block-diagonal; the
    result is the members' mean log-probability, as `mlp_logp` would give each."""

    def __init__(self, members: Sequence[dict[str, np.ndarray]], proj: np.ndarray | None = None) -> None:
        f64 = [{k: np.asarray(v, np.float64) for k, v in m.items()} for m in members]
        w = np.hstack([m["w1"] / m["sd"][:, None] for m in f64])
        self.b1 = np.concatenate([m["b1"] - (m["mu"] / m["sd"]) @ m["w1"] for m in f64]).astype(np.float32)
        if proj is None:
            self.a, self.back = w.astype(np.float32), None
        else:
            p = np.asarray(proj, np.float64)
            self.a, self.back = (w @ p).astype(np.float32), np.ascontiguousarray(p.T, dtype=np.float32)
        hidden, classes = members[0]["w2"].shape
        self.w2 = np.zeros((hidden * len(members), classes * len(members)), np.float32)
        for i, m in enumerate(members):
            self.w2[i * hidden : (i + 1) * hidden, i * classes : (i + 1) * classes] = m["w2"]
        self.b2 = np.concatenate([m["b2"] for m in members]).astype(np.float32)
        self.members, self.classes = len(members), classes

    def pre(self, x: np.ndarray) -> np.ndarray:
        """The first layer's pre-activations of `x` (rows), as the heads see them."""
        z = x @ self.a
        return (z @ self.back if self.back is not None else z) + self.b1

    def __call__(self, x: np.ndarray) -> np.ndarray:
        z = (np.maximum(self.pre(x), 0) @ self.w2 + self.b2).reshape(len(x), self.members, self.classes)
        z = z - z.max(2, keepdims=True)
        return np.asarray((z - np.log(np.exp(z).sum(2, keepdims=True))).mean(1), dtype=np.float32)


def fuse(members: Sequence[dict[str, np.ndarray]], proj: np.ndarray | None = None) -> Any:
    """The members as one `Fused` head (or a head of nothing when there are none)."""
    if not members:
        return lambda x: np.zeros((len(x), len(LABELS)), np.float32)
    return Fused(members, proj)


def _allowed(a: str, b: str) -> bool:
    if a == "O" or a[0] in "LU":
        return b == "O" or b[0] in "BU"
    return b[0] in "IL" and a[2:] == b[2:]


_STEP = np.array([[0.0 if _allowed(a, b) else -1e9 for b in LABELS] for a in LABELS])
_START = np.array([0.0 if lab == "O" or lab[0] in "BU" else -1e9 for lab in LABELS])
_END = np.array([0.0 if lab == "O" or lab[0] in "LU" else -1e9 for lab in LABELS])


def viterbi(logp: np.ndarray) -> list[int]:
    """The best tag sequence BILOU allows."""
    if not len(logp):
        return []
    score, back = logp[0] + _START, []
    for row in logp[1:]:
        cand = score[:, None] + _STEP
        back.append(cand.argmax(0))
        score = cand.max(0) + row
    path = [int((score + _END).argmax())]
    for b in reversed(back):
        path.append(int(b[path[-1]]))
    return path[::-1]


def spans_of(tags: Sequence[str]) -> list[Span]:
    out: list[Span] = []
    start = None
    for i, tag in enumerate(tags):
        if tag == "O" or tag[2:] not in TYPES:
            start = None
        elif tag[0] == "U":
            out.append(Span(i, i + 1, tag[2:]))
        elif tag[0] == "B":
            start = i
        elif tag[0] == "L" and start is not None:
            out.append(Span(start, i + 1, tag[2:]))
            start = None
    return out


def _bucket(n: int) -> int:
    return sum(n > edge for edge in DISTANCES)


def pair_features(words: Sequence[str], states: np.ndarray, spans: Sequence[Span], a: Span, b: Span) -> np.ndarray:
    """A candidate relation's input: head `a` and tail `b` (their mean last-layer states), the words between."""
    hidden = states.shape[1] // (2 * LAYERS)
    mean = states[:, hidden : 2 * hidden]  # each word's mean of pieces, last layer
    lo, hi = (a.end, b.start) if a.end <= b.start else (b.end, a.start)
    between = mean[lo:hi].mean(0) if hi > lo else np.zeros(hidden, np.float32)
    bag = np.zeros(BETWEEN_BINS, np.float32)
    for w in words[lo:hi]:
        bag[zlib.crc32(w.lower().encode()) % BETWEEN_BINS] = 1.0
    types = np.zeros(6, np.float32)
    types[TYPES.index(a.type)] = types[3 + TYPES.index(b.type)] = 1.0
    gap = np.zeros(len(DISTANCES) + 1, np.float32)
    gap[_bucket(max(hi - lo, 0))] = 1.0
    inside = sum(1 for s in spans if s.start >= lo and s.end <= hi)
    marks = np.array([a.end <= b.start, inside == 0, inside == 1, inside >= 2], np.float32)
    return np.concatenate([mean[a.start : a.end].mean(0), mean[b.start : b.end].mean(0), between, bag, types, gap,
                           marks]).astype(np.float32)  # fmt: skip


def candidates(spans: Sequence[Span]) -> list[tuple[Span, Span]]:
    """The ordered pairs of names some relation may join (by their types)."""
    kinds = set(RELATIONS.values())
    return [(a, b) for a in spans for b in spans if a != b and (a.type, b.type) in kinds]


def relation_mask(a: Span, b: Span) -> np.ndarray:
    """0 for the labels the pair's types allow (none among them), -inf otherwise."""
    return np.array([0.0 if r == "none" or RELATIONS[r] == (a.type, b.type) else -np.inf for r in REL_LABELS])


# -- the shipped extractor -------------------------------------------------------------------------------------


class Extractor:
    """Names and relations of one text, from its words and their states."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self._weights = dict(weights)
        members = sorted({k.split(".")[0] for k in weights if k.startswith("tag") and "." in k})
        self.taggers = [{k.split(".", 1)[1]: weights[k] for k in weights if k.startswith(m + ".")} for m in members]
        self.relate = {k.split(".", 1)[1]: weights[k] for k in weights if k.startswith("rel.")}
        self.none_bias = float(weights.get("none_bias", np.zeros(1))[0])
        self._fused = fuse(self.taggers, weights.get("tag_proj"))
        self._related = fuse([self.relate] if self.relate else [])

    def weights(self) -> dict[str, np.ndarray]:
        return dict(self._weights)

    @classmethod
    def from_arrays(cls, arrays: Any) -> Extractor:
        return cls({k: np.asarray(arrays[k], dtype=np.float32) for k in arrays.files})

    def tag(self, words: Sequence[str], states: np.ndarray) -> list[Span]:
        if not words:
            return []
        return spans_of([LABELS[i] for i in viterbi(self._fused(word_features(words, states)))])

    def links(self, words: Sequence[str], states: np.ndarray, spans: Sequence[Span]) -> list[Link]:
        pairs = candidates(spans)
        if not pairs or not self.relate:
            return []
        x = np.vstack([pair_features(words, states, spans, a, b) for a, b in pairs])
        logp = self._related(x)
        logp[:, 0] += self.none_bias
        out = []
        for (a, b), row in zip(pairs, logp, strict=True):
            row = row + relation_mask(a, b)
            best = int(row.argmax())
            if best:
                out.append(Link(a, REL_LABELS[best], b, float(np.exp(row[best]))))
        return out

    def read(self, words: Sequence[str], states: np.ndarray) -> tuple[list[Span], list[Link]]:
        # products of a few dozen rows: BLAS's threads cost more than they give (1.5 ms a turn on one,
        # ~10 ms beside the encoder's own threads on two cores), so one thread while they run
        with _blas().limit(limits=1, user_api="blas"):
            spans = self.tag(words, states)
            return spans, self.links(words, states, spans)


@cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


@cache
def shipped() -> Extractor | None:
    """The extractor whose weights ship in the package, or None when they are not there."""
    ref = resources.files("engram").joinpath(WEIGHTS)
    if not ref.is_file():
        return None
    with ref.open("rb") as f, np.load(f) as arrays:
        return Extractor.from_arrays(arrays)


def read_text(
    extractor: Extractor, text: str, offsets: Sequence[tuple[int, int]], pieces: np.ndarray, start: int = 0
) -> tuple[list[str], list[Span], list[Link]]:
    """The product's path: `text`'s words (as the rules split them), their states gathered from the embedding
    pass's pieces (`offsets`, `pieces`), then names and relations. Only the words from character `start` on are
    read: a turn embedded after the one before it has only its own words tagged."""
    words, _, spans, links = _read(extractor, text, offsets, pieces, start)
    return words, spans, links


def _read(
    extractor: Extractor, text: str, offsets: Sequence[tuple[int, int]], pieces: np.ndarray, start: int
) -> tuple[list[str], list[tuple[int, int]], list[Span], list[Link]]:
    words = gn.tokens(text[start:])
    chars = [(a + start, b + start) for a, b in align(text[start:], words)]
    spans, links = extractor.read(words, word_states(pieces, offsets, chars))
    return words, chars, spans, links


@dataclass(frozen=True)
class Found:
    """What the extractor found in one text, in the graph's terms: names (kind, name) in the order they stand,
    and links (head, relation, tail) between two of them."""

    names: tuple[tuple[str, str], ...] = ()
    links: tuple[tuple[tuple[str, str], str, tuple[str, str]], ...] = ()


NOTHING = Found()


# Chat opens sentences with words the news the heads learned from rarely does ("Thanks, Evan!", "Hey Jolene",
# "Oh", "I've"): capitalised there, never names. A name's words from its ends that are such words, or pronouns
# and other function words, are not part of it; a name left with none, lower-cased, or a contraction is none,
# and so is one with a lower-cased word inside that joins no name ("Mental health"; "Rio de Janeiro" stays).
OPENERS = frozenset({
    "hey", "hi", "hello", "thanks", "thank", "wow", "oh", "ok", "okay", "yeah", "yes", "yep", "no", "nope", "well",
    "whoa", "haha", "hah", "aw", "aww", "ah", "hmm", "sorry", "dear", "congrats", "congratulations", "bye", "yo",
    "look", "take", "believe", "let", "check", "keep", "try", "see", "good", "great", "nice", "cool", "awesome",
    "sure", "please", "love", "welcome", "morning", "evening", "night",
})  # fmt: skip
_CONTRACTION = re.compile(r"(?i)^[a-z]+(?:'(?:m|ve|ll|re|d)|n't)$")


def _plain(word: str) -> bool:
    w = word.lower()
    if not any(c.isalnum() for c in w):
        return True
    return w in OPENERS or w in gn.LEADING or w in STOP_WORDS or _CONTRACTION.match(word) is not None


def trimmed(words: Sequence[str], span: Span) -> Span | None:
    """`span` without the chat openers and function words at its ends; None when nothing name-like is left."""
    start, end = span.start, span.end
    while start < end and _plain(words[start]):
        start += 1
    while end > start and _plain(words[end - 1]):
        end -= 1
    if start == end or not words[start][:1].isupper():
        return None
    if any(w[:1].islower() and w.lower() not in gn.CONNECT for w in words[start + 1 : end]):
        return None  # "Mental health": a sentence's capital, not a name's
    return Span(start, end, span.type)


def found(
    extractor: Extractor, text: str, offsets: Sequence[tuple[int, int]], pieces: np.ndarray, start: int = 0
) -> Found:
    """`read_text` as the graph takes it: each span named by the text it covers (chat's openers trimmed),
    typed as the graph types."""
    words, chars, spans, links = _read(extractor, text, offsets, pieces, start)
    kept = {s: trimmed(words, s) for s in spans}

    def name(s: Span) -> tuple[str, str]:
        return KINDS[s.type], text[chars[s.start][0] : chars[s.end - 1][1]]

    names = tuple(dict.fromkeys(name(t) for t in kept.values() if t is not None))
    pairs = [(kept[k.head], k.relation, kept[k.tail]) for k in links]
    return Found(names, tuple((name(h), r, name(t)) for h, r, t in pairs if h is not None and t is not None))
