"""Issue #50, first step of the learned extractor: entity spans tagged from MiniLM's own token states (the encoder
Engram runs over every text it stores), measured on CoNLL04. Not yet in the product: this trains, chooses and
reports, so the next step (the tagger in the graph job, fed by the embedding pass, and the relation head) starts
from measured figures.

Features of a word: the last layer's state of its first word piece and the mean of its pieces, its neighbours'
states, its shape and gazetteer marks, where it stands in a run of capitalised words and a hashed suffix (the
model lowercases: capitals are not in the states). Heads over BILOU tags of Peop / Org / Loc: a softmax
(L2-regularised, full batch, Adam from zeros) or one hidden layer (ReLU, dropout, minibatch Adam, seeded), both
deterministic, decoded with BILOU's constraints by Viterbi. Head and L2 weight are chosen by 3-fold
cross-validation on train; dev is reported, never used to choose.

`make train-extractor` (prints the figures; writes the weights under infra/extractor/out/, not committed).
Hand-written: the softmax regression and the Viterbi decoder (a few lines of numpy; no registry package here
trains a linear CRF-free tagger without bringing scikit-learn or a deep-learning framework into the build)."""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "conll04"
OUT = Path(__file__).with_name("out")
TYPES = ["Peop", "Org", "Loc"]
LABELS = ["O"] + [f"{p}-{t}" for t in TYPES for p in "BILU"]
LAMBDAS = (1e-3, 3e-3, 1e-2)  # the linear head's L2 weights tried
MLP_LAMBDAS = (1e-4,)  # the hidden layer's
ITERATIONS = 300


def encoder() -> tuple[Any, Any]:
    from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder

    emb = OnnxMiniLMEmbedder()
    return emb._tokenizer, emb._small


def word_states(tok: Any, sess: Any, words: list[str]) -> np.ndarray:
    enc = tok.encode(words, is_pretokenized=True)
    ids = np.array([enc.ids], dtype=np.int64)
    (h,) = sess.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i, w in enumerate(enc.word_ids):
        if w is not None:
            first.setdefault(w, i)
            last[w] = i
    out = np.zeros((len(words), 2 * h.shape[2]), dtype=np.float32)
    for w, i in first.items():
        out[w, : h.shape[2]] = h[0, i]
        out[w, h.shape[2] :] = h[0, first[w] : last[w] + 1].mean(0)
    return out


def shape(words: list[str]) -> np.ndarray:
    from engram.families.entities import graph_names as gn

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
    return np.array(rows, dtype=np.float32)


def features(tok: Any, sess: Any, words: list[str]) -> np.ndarray:
    h = word_states(tok, sess, words)
    d = h.shape[1] // 2
    zero = np.zeros((1, d), np.float32)
    base = h[:, :d]
    return np.hstack([h, np.vstack([zero, base[:-1]]), np.vstack([base[1:], zero]), shape(words), runs(words)])


def runs(words: list[str]) -> np.ndarray:
    """Where a word stands in its run of capitalised words, and a hashed suffix (the model lowercases)."""
    import zlib

    cap = [w[:1].isupper() for w in words]
    rows = []
    for i, w in enumerate(words):
        j = i
        while j > 0 and cap[j - 1]:
            j -= 1
        k = i
        while k + 1 < len(words) and cap[k + 1]:
            k += 1
        length = k - j + 1 if cap[i] else 0
        suffix = np.zeros(64, np.float32)
        suffix[zlib.crc32(w[-3:].lower().encode()) % 64] = 1.0
        rows.append(
            np.concatenate(
                [
                    [
                        length == 1,
                        length == 2,
                        length >= 3,
                        cap[i] and i == j,
                        cap[i] and i == k,
                        w.isalpha() and w.islower(),
                    ],
                    suffix,
                ]
            ).astype(np.float32)
        )
    return np.vstack(rows)


def label(tag: str) -> int:
    kind = tag.split("-", 1)[-1]
    return 0 if tag == "O" or kind not in TYPES else LABELS.index(tag)


class MLP:
    """One hidden layer (ReLU), minibatch Adam: a non-linear head over the same features."""

    def __init__(self, lam: float, hidden: int = 256, epochs: int = 15) -> None:
        self.lam, self.hidden, self.epochs = lam, hidden, epochs

    def fit(self, xs: list[np.ndarray], ys: list[list[int]]) -> MLP:
        a = np.vstack(xs)
        self.mu, self.sd = a.mean(0), a.std(0) + 1e-6
        a = ((a - self.mu) / self.sd).astype(np.float32)
        y = np.concatenate([np.array(t) for t in ys])
        n, d = a.shape
        k = len(LABELS)
        rng = np.random.default_rng(0)
        self.w1 = (rng.standard_normal((d, self.hidden)) * np.sqrt(2 / d)).astype(np.float32)
        self.b1 = np.zeros(self.hidden, np.float32)
        self.w2 = (rng.standard_normal((self.hidden, k)) * np.sqrt(1 / self.hidden)).astype(np.float32)
        self.b2 = np.zeros(k, np.float32)
        params = [self.w1, self.b1, self.w2, self.b2]
        moments = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
        step = 0
        for _ in range(self.epochs):
            order = rng.permutation(n)
            for s in range(0, n, 256):
                idx = order[s : s + 256]
                x, t = a[idx], y[idx]
                hpre = x @ self.w1 + self.b1
                hh = np.maximum(hpre, 0)
                mask = (rng.random(hh.shape) > 0.3).astype(np.float32) / 0.7
                hd = hh * mask
                z = hd @ self.w2 + self.b2
                p = np.exp(z - z.max(1, keepdims=True))
                p /= p.sum(1, keepdims=True)
                p[np.arange(len(t)), t] -= 1
                g = p / len(t)
                gw2 = hd.T @ g + self.lam * self.w2
                gb2 = g.sum(0)
                gh = (g @ self.w2.T) * mask * (hpre > 0)
                gw1 = x.T @ gh + self.lam * self.w1
                gb1 = gh.sum(0)
                step += 1
                for param, grad, (m, v) in zip(params, (gw1, gb1, gw2, gb2), moments, strict=True):
                    m *= 0.9
                    m += 0.1 * grad
                    v *= 0.999
                    v += 0.001 * grad * grad
                    param -= 1e-3 * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        return self

    def tags(self, x: np.ndarray) -> list[int]:
        h = np.maximum(((x - self.mu) / self.sd) @ self.w1 + self.b1, 0)
        z = h @ self.w2 + self.b2
        z = z - z.max(1, keepdims=True)
        return viterbi(z - np.log(np.exp(z).sum(1, keepdims=True)))


class Tagger:
    def __init__(self, lam: float) -> None:
        self.lam = lam

    def fit(self, xs: list[np.ndarray], ys: list[list[int]]) -> Tagger:
        a = np.vstack(xs)
        self.mu, self.sd = a.mean(0), a.std(0) + 1e-6
        a = (a - self.mu) / self.sd
        n, d = a.shape
        k = len(LABELS)
        onehot = np.eye(k, dtype=np.float32)[np.concatenate([np.array(y) for y in ys])]
        self.w, self.c = np.zeros((d, k), np.float32), np.zeros(k, np.float32)
        moments = [(np.zeros_like(p), np.zeros_like(p)) for p in (self.w, self.c)]
        for it in range(1, ITERATIONS + 1):
            z = a @ self.w + self.c
            p = np.exp(z - z.max(1, keepdims=True))
            g = (p / p.sum(1, keepdims=True) - onehot) / n
            for param, grad, (m, v) in zip((self.w, self.c), (a.T @ g + self.lam * self.w, g.sum(0)), moments,
                                           strict=True):  # fmt: skip
                m *= 0.9
                m += 0.1 * grad
                v *= 0.999
                v += 0.001 * grad * grad
                param -= 0.05 * (m / (1 - 0.9**it)) / (np.sqrt(v / (1 - 0.999**it)) + 1e-8)
        return self

    def tags(self, x: np.ndarray) -> list[int]:
        z = ((x - self.mu) / self.sd) @ self.w + self.c
        return viterbi(z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True)))


def _allowed(a: str, b: str) -> bool:
    if a == "O" or a[0] in "LU":
        return b == "O" or b[0] in "BU"
    return b[0] in "IL" and a[2:] == b[2:]


STEP = np.array([[0.0 if _allowed(a, b) else -1e9 for b in LABELS] for a in LABELS])
START = np.array([0.0 if lab == "O" or lab[0] in "BU" else -1e9 for lab in LABELS])
END = np.array([0.0 if lab == "O" or lab[0] in "LU" else -1e9 for lab in LABELS])


def viterbi(logp: np.ndarray) -> list[int]:
    score, back = logp[0] + START, []
    for row in logp[1:]:
        cand = score[:, None] + STEP
        back.append(cand.argmax(0))
        score = cand.max(0) + row
    path = [int((score + END).argmax())]
    for b in reversed(back):
        path.append(int(b[path[-1]]))
    return path[::-1]


def spans(tags: list[str]) -> set[tuple[int, int, str]]:
    out, start = set(), None
    for i, tag in enumerate(tags):
        if tag == "O" or tag[2:] not in TYPES:
            start = None
        elif tag[0] == "U":
            out.add((i, i + 1, tag[2:]))
        elif tag[0] == "B":
            start = i
        elif tag[0] == "L" and start is not None:
            out.add((start, i + 1, tag[2:]))
            start = None
    return out


def score(tagger: Any, xs: list[np.ndarray], golds: list[list[str]]) -> dict[str, float]:
    counts = {t: [0, 0, 0] for t in [*TYPES, "micro"]}
    for x, gold in zip(xs, golds, strict=True):
        pred, want = spans([LABELS[i] for i in tagger.tags(x)]), spans(gold)
        for s in pred | want:
            column = 0 if s in pred and s in want else 1 if s in pred else 2
            counts[s[2]][column] += 1
            counts["micro"][column] += 1
    return {t: round(2 * tp / max(2 * tp + fp + fn, 1), 3) for t, (tp, fp, fn) in counts.items()}


def main() -> None:
    tok, sess = encoder()
    split: dict[str, tuple[list[np.ndarray], list[list[str]]]] = {}
    for name in ("train", "dev"):
        started = time.perf_counter()
        rows = json.loads((DATA / f"conll04_{name}.json").read_text())
        split[name] = ([features(tok, sess, r["tokens"]) for r in rows], [r["tags"] for r in rows])
        ms = (time.perf_counter() - started) * 1000 / len(rows)
        print(f"{name}: {len(rows)} sentences, {ms:.1f} ms each (encoder + features)", file=sys.stderr)
    xs, golds = split["train"]
    ys = [[label(t) for t in g] for g in golds]
    folds = [list(range(i, len(xs), 3)) for i in range(3)]
    candidates: list[tuple[str, Any]] = [(f"linear, L2 {lam:g}", partial(Tagger, lam)) for lam in LAMBDAS]
    candidates += [(f"one hidden layer, L2 {lam:g}", partial(MLP, lam)) for lam in MLP_LAMBDAS]
    chosen, best = candidates[0], -1.0
    for name, make in candidates:
        fs = []
        for held in folds:
            keep = sorted(set(range(len(xs))) - set(held))
            tagger = make().fit([xs[i] for i in keep], [ys[i] for i in keep])
            fs.append(score(tagger, [xs[i] for i in held], [golds[i] for i in held])["micro"])
        print(f"{name}: 3-fold cross-validation on train, entity F1 {np.mean(fs):.3f}", file=sys.stderr, flush=True)
        if np.mean(fs) > best:
            chosen, best = (name, make), float(np.mean(fs))
    tagger = chosen[1]().fit(xs, ys)
    report = {"head": chosen[0], "cv_train": round(best, 3), "dev": score(tagger, *split["dev"])}
    OUT.mkdir(exist_ok=True)
    np.savez(OUT / "entity_tagger.npz", **{k: v for k, v in vars(tagger).items() if isinstance(v, np.ndarray)})
    print(json.dumps(report))


if __name__ == "__main__":
    main()
