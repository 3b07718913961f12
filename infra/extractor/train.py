"""Issue #50: trains the learned extractor (`engram.families.entities.tagger`) on CoNLL04's train split and writes
the weights the package ships (`layers/engram/engram/data/extractor.npz`).

- Word states come from the product's own encoder session (the embedder, with layer 3 exposed beside the last
  layer): each sentence is encoded as running text, as a writer would send it, and its pieces are gathered into
  the gold words by character offsets, as the product gathers them into its own words.
- The entity head is an ensemble of one-hidden-layer networks (ReLU, dropout, minibatch Adam, seeded) over
  BILOU tags; its size is chosen by 3-fold cross-validation on train.
- The relation head is one hidden layer over the pairs of gold names of train whose types a relation joins; the
  bias of "no relation" is chosen on train too, end to end: on each fold's names as the entity head found them
  while that fold was held out.
- Dev is scored once, at the end, through the product's path (its words, its tagger, its relations) and as
  `bench/conll04.py` scores the rules; it never chooses anything.

Deterministic: seeded generators, so the same data on the same machine give the same weights
(`make train-extractor`; the test suite checks the shipped file's figures, not its bytes).

Hand-written: the training loops (minibatch Adam on a softmax with one hidden layer, a few lines of numpy), so
the build needs no deep-learning framework."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.conll04 import DATA, gold, prf, text_of  # noqa: E402
from engram.families.entities import tagger as tg  # noqa: E402

OUT = Path(__file__).with_name("out")
SHIPPED = ROOT / "layers" / "engram" / "engram" / tg.WEIGHTS
TAGGERS = ((256, 1), (256, 3), (512, 3))  # (hidden units, members) tried for the entity head
NONE_BIASES = (-1.0, -0.5, 0.0, 0.5, 1.0)
RANKS = (32, 64, 96, 128, 192)  # low-rank bases of the entity head's first layer tried (cost: #50's 2 ms budget)
CONLL = {"works_at": "Work_For", "killed": "Kill", "based_in": "OrgBased_In", "lives_in": "Live_In",
         "located_in": "Located_In"}  # fmt: skip


def encode(rows: list[dict[str, Any]]) -> list[np.ndarray]:
    """Each sentence's word states through the product's encoder session (cached under out/)."""
    from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder

    texts = [text_of(r["tokens"]) for r in rows]
    key = hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]
    cache = OUT / f"states-{key}.npz"
    if cache.exists():
        with np.load(cache) as f:
            return [f[str(i)].astype(np.float32) for i in range(len(rows))]
    emb = OnnxMiniLMEmbedder()
    out = []
    for row, text in zip(rows, texts, strict=True):
        _, [(offsets, pieces)] = emb.embed_with_states([text])
        words = ['"' if t in ("``", "''") else t for t in row["tokens"]]
        out.append(tg.word_states(pieces, offsets, tg.align(text, words)))
    OUT.mkdir(exist_ok=True)
    np.savez(cache, **{str(i): s.astype(np.float16) for i, s in enumerate(out)})
    return out


class Head:
    """One hidden layer (ReLU, dropout 0.3), softmax, minibatch Adam: `params` is what `tagger.mlp_logp` reads."""

    def __init__(self, classes: int, hidden: int, seed: int, epochs: int = 15, lam: float = 1e-4) -> None:
        self.classes, self.hidden, self.seed, self.epochs, self.lam = classes, hidden, seed, epochs, lam

    def fit(self, a: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
        mu, sd = a.mean(0), a.std(0) + 1e-6
        a = ((a - mu) / sd).astype(np.float32)
        n, d = a.shape
        rng = np.random.default_rng(self.seed)
        w1 = (rng.standard_normal((d, self.hidden)) * np.sqrt(2 / d)).astype(np.float32)
        b1 = np.zeros(self.hidden, np.float32)
        w2 = (rng.standard_normal((self.hidden, self.classes)) * np.sqrt(1 / self.hidden)).astype(np.float32)
        b2 = np.zeros(self.classes, np.float32)
        params = [w1, b1, w2, b2]
        moments = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
        step = 0
        for _ in range(self.epochs):
            order = rng.permutation(n)
            for s in range(0, n, 256):
                idx = order[s : s + 256]
                x, t = a[idx], y[idx]
                hpre = x @ w1 + b1
                mask = (rng.random(hpre.shape) > 0.3).astype(np.float32) / 0.7
                hd = np.maximum(hpre, 0) * mask
                z = hd @ w2 + b2
                p = np.exp(z - z.max(1, keepdims=True))
                p /= p.sum(1, keepdims=True)
                p[np.arange(len(t)), t] -= 1
                g = p / len(t)
                gh = (g @ w2.T) * mask * (hpre > 0)
                grads = (x.T @ gh + self.lam * w1, gh.sum(0), hd.T @ g + self.lam * w2, g.sum(0))
                step += 1
                for param, grad, (m, v) in zip(params, grads, moments, strict=True):
                    m *= 0.9
                    m += 0.1 * grad
                    v *= 0.999
                    v += 0.001 * grad * grad
                    param -= 1e-3 * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        return {"mu": mu, "sd": sd, "w1": w1, "b1": b1, "w2": w2, "b2": b2}


def project(weights: dict[str, np.ndarray], rows: list[dict[str, Any]], xs: list[np.ndarray]) -> dict[str, Any]:
    """The smallest basis of the entity head's pre-activations on train (the top right singular vectors of x @ W1) whose
    train entity F1 is within 0.001 of the full head's: the run-time head then costs words x (d x r + r x units)
    instead of words x d x units. Returns the basis (as shipped, float16) and the figures."""
    full = tg.Extractor(weights)
    truths = [gold(r) for r in rows]

    def f1(ex: tg.Extractor) -> float:
        res = [(found(r["tokens"], tg.spans_of([tg.LABELS[i] for i in tg.viterbi(ex._fused(x))]), []), t)
               for r, x, t in zip(rows, xs, truths, strict=True)]  # fmt: skip
        return float(tally(res)["entities"]["micro"]["f1"])

    head = tg.Fused(full.taggers)
    z = head.pre(np.vstack(xs)) - head.b1  # uncentred, so the basis keeps the mean too
    _, _, vt = np.linalg.svd(z.astype(np.float64), full_matrices=False)
    base = f1(full)
    tried = {}
    for rank in RANKS:
        proj = vt[:rank].T.astype(np.float16)
        tried[rank] = f1(tg.Extractor({**weights, "tag_proj": proj}))
        if tried[rank] >= base - 0.001:
            return {"tag_proj": proj, "rank": rank, "train_f1": tried, "train_f1_full": base}
    return {"tag_proj": None, "rank": None, "train_f1": tried, "train_f1_full": base}


def label(tag: str) -> int:
    return tg.LABELS.index(tag) if tag != "O" and tag[2:] in tg.TYPES else 0


def fit_tagger(xs: list[np.ndarray], ys: list[np.ndarray], hidden: int, members: int) -> tg.Extractor:
    a, y = np.vstack(xs), np.concatenate(ys)
    weights = {f"tag{m}.{k}": v for m in range(members) for k, v in Head(len(tg.LABELS), hidden, m).fit(a, y).items()}
    return tg.Extractor(weights)


def gold_spans(row: dict[str, Any]) -> list[tg.Span | None]:
    """The row's spans in order (None for CoNLL04's `Other`, which relations index too)."""
    out: list[tg.Span | None] = []
    start = 0
    for i, tag in enumerate(row["tags"]):
        if tag[0] in "BU":
            start = i
        if tag[0] in "LU":
            out.append(tg.Span(start, i + 1, tag[2:]) if tag[2:] in tg.TYPES else None)
    return out


def pairs(rows: list[dict[str, Any]], states: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    back = {v: k for k, v in CONLL.items()}
    for row, st in zip(rows, states, strict=True):
        spans = gold_spans(row)
        known = [s for s in spans if s is not None]
        truth = {(spans[r["head"]], spans[r["tail"]]): back[r["type"]] for r in row["relations"]}
        for a, b in tg.candidates(known):
            xs.append(tg.pair_features(row["tokens"], st, known, a, b))
            ys.append(tg.REL_LABELS.index(truth.get((a, b), "none")))
    return np.vstack(xs), np.array(ys)


def fit_relations(rows: list[dict[str, Any]], states: list[np.ndarray]) -> dict[str, np.ndarray]:
    x, y = pairs(rows, states)
    return {f"rel.{k}": v for k, v in Head(len(tg.REL_LABELS), 128, 0, epochs=20).fit(x, y).items()}


def found(words: list[str], spans: list[tg.Span], links: list[tg.Link]) -> tuple[set[Any], set[Any]]:
    """Names and relations as `bench/conll04.py` compares them."""
    from bench.conll04 import norm

    def text(s: tg.Span) -> str:
        return norm(text_of(words[s.start : s.end]))

    return ({(text(s), s.type) for s in spans},
            {(text(k.head), CONLL[k.relation], text(k.tail)) for k in links})  # fmt: skip


def tally(results: list[tuple[tuple[set[Any], set[Any]], tuple[set[Any], set[Any]]]]) -> dict[str, Any]:
    kinds = {"entities": list(tg.TYPES), "relations": list(CONLL.values())}
    out: dict[str, Any] = {}
    for n, (part, names) in enumerate(kinds.items()):
        counts = {k: [0, 0, 0] for k in names}
        for pred, truth in results:
            p, t = pred[n], truth[n]
            for x in p | t:
                counts[x[1]][0 if x in p and x in t else 1 if x in p else 2] += 1
        out[part] = {k: prf(*c) for k, c in counts.items()}
        out[part]["micro"] = prf(*(sum(c[i] for c in counts.values()) for i in range(3)))
    return out


def main() -> None:
    split = {name: json.loads((DATA / f"conll04_{name}.json").read_text()) for name in ("train", "dev")}
    started = time.perf_counter()
    states = {name: encode(rows) for name, rows in split.items()}
    print(f"states: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    rows, st = split["train"], states["train"]
    xs = [tg.word_features(r["tokens"], s) for r, s in zip(rows, st, strict=True)]
    ys = [np.array([label(t) for t in r["tags"]]) for r in rows]
    folds = [list(range(i, len(rows), 3)) for i in range(3)]
    truths = [gold(r) for r in rows]
    best: tuple[float, tuple[int, int], dict[int, list[tg.Span]]] = (-1.0, TAGGERS[0], {})
    for hidden, members in TAGGERS:
        held_out: dict[int, list[tg.Span]] = {}
        for held in folds:
            keep = sorted(set(range(len(rows))) - set(held))
            ex = fit_tagger([xs[i] for i in keep], [ys[i] for i in keep], hidden, members)
            held_out |= {i: ex.tag(rows[i]["tokens"], st[i]) for i in held}
        f1 = tally([(found(rows[i]["tokens"], held_out[i], []), truths[i]) for i in range(len(rows))])
        score = f1["entities"]["micro"]["f1"]
        print(f"entity head, {hidden} units x {members}: 3-fold CV on train, F1 {score:.3f}", file=sys.stderr)
        if score > best[0]:
            best = (score, (hidden, members), held_out)
    cv_entities, (hidden, members), held_out = best
    # the relation head on each fold's gold pairs, applied to the names that fold's entity head found
    by_bias: dict[float, list[Any]] = {b: [] for b in NONE_BIASES}
    for held in folds:
        keep = sorted(set(range(len(rows))) - set(held))
        ex = tg.Extractor(fit_relations([rows[i] for i in keep], [st[i] for i in keep]))
        for bias in NONE_BIASES:
            ex.none_bias = bias
            for i in held:
                words = rows[i]["tokens"]
                by_bias[bias].append((found(words, held_out[i], ex.links(words, st[i], held_out[i])), truths[i]))
    cv_rel = {b: tally(r)["relations"]["micro"]["f1"] for b, r in by_bias.items()}
    bias = max(NONE_BIASES, key=lambda b: cv_rel[b])
    print(f"relation head: 3-fold CV on train, end to end, by none bias {cv_rel}", file=sys.stderr)
    weights = {**fit_tagger(xs, ys, hidden, members).weights(), **fit_relations(rows, st)}
    weights["none_bias"] = np.array([bias], np.float32)
    weights = {k: v.astype(np.float16).astype(np.float32) for k, v in weights.items()}  # as shipped
    low = project(weights, rows, xs)
    print(
        f"entity head's basis: rank {low['rank']}, train F1 {low['train_f1']} (full {low['train_f1_full']:.4f})",
        file=sys.stderr,
    )
    if low["tag_proj"] is not None:
        weights["tag_proj"] = low["tag_proj"]
    SHIPPED.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(SHIPPED, **{k: v.astype(np.float16) for k, v in sorted(weights.items())})
    shipped = tg.Extractor.from_arrays(np.load(SHIPPED))
    dev = split["dev"]
    results = []
    for r, s in zip(dev, states["dev"], strict=True):
        spans, links = shipped.read(r["tokens"], s)
        results.append((found(r["tokens"], spans, links), gold(r)))
    report = {"entity head": f"{hidden} units x {members}", "cv_train_entities": cv_entities, "rank": low["rank"],
              "none_bias": bias, "cv_train_relations": cv_rel[bias], "dev (gold words)": tally(results),
              "bytes": SHIPPED.stat().st_size}  # fmt: skip
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
