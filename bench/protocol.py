"""Issue #25: retrieval settings chosen on two dev collections and checked on the third (cranfield, CISI,
LoCoMo), all three ways, and the defaults measured as a client receives them.

- **Protocol** (in process, through the operations): every candidate setting (a fusion design, the query
  vector of a many-sentence question, one hit per document) runs every query of every collection; its
  per-query metric is compared, query by query, with the simplest design (a plain RRF, k = 60, of the two
  lists). Each fold chooses on two collections (the best mean delta; within TIE of the best, the simpler)
  and reports the held-out collection's delta with a paired-bootstrap 95 % interval. A setting's dev
  score is its worse mean delta of the two: it must help both collections it is chosen on.
- **Defaults over HTTP** (`knowledge_search` / `memory_recall` over MCP on a fresh server, the client's
  k): bm25, vector and hybrid as returned, and a plain RRF (k = 60) of the bm25 and vector results the
  client received — the floor hybrid must reach on every collection.

Metrics: cranfield and CISI nDCG@10 on the first 10 distinct documents of k = 30 results (the definitions
of ../shared/data/README.md); LoCoMo evidence-turn recall@10 (and @5, and the right session among them)
of k = 10 results."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench import latency
from bench.cranfield import CISI, DATA, load, metrics
from bench.fusion import rrf60
from bench.latency import pct
from bench.locomo import DATA as LOCOMO
from bench.locomo import Stored, session_of, store_all
from engram.cli.devserver import serve
from engram.families import find
from engram.families.knowledge import search as knowledge_search
from engram.kernel.caller import ANY
from engram.search import rules as search_rules
from engram.search.rules import Rules
from engram.settings import Settings
from engram.wiring import Engram, build_local

CLIENT_K = 30  # what a client asks of knowledge_search; scored on the first 10 distinct documents
MEMORY_K = 10
TIE = 0.002  # the worse dev collection's mean delta a more complex setting must win by
RESAMPLES = 10_000
COLLECTIONS = ("cranfield", "cisi", "locomo")


@dataclass(frozen=True)
class Setting:
    """One candidate: a fusion design, sentence-mean query vectors or not, one hit per document or not."""

    rules: Rules
    sentences: bool = False
    per_document: bool = False

    @property
    def name(self) -> str:
        return self.rules.name + ("+sentences" if self.sentences else "") + ("+per-doc" if self.per_document else "")

    @property
    def complexity(self) -> int:
        r = self.rules
        parts = (r.rrf_k != 60, r.vector_weight is not None, r.feedback, r.smooth_bm25, r.smooth_fused, r.agree)
        return sum(parts) + self.sentences + self.per_document


PLAIN = Rules("rrf60")
CONVEX = Rules("convex0.35", vector_weight=0.35)
OLD_MEMORY = Rules("convex0.35+smooth(0.3)+agree", vector_weight=0.35, smooth_fused=True, smooth_alpha=0.3, agree=True)
OLD_DOCUMENTS = Rules("rrf20+feedback+smooth(0.3)+agree", 20, None, True, True, True, True, 0.3)


def smoothed(alpha: float, weight: float = 0.35, agree: bool = False) -> Rules:
    name = f"convex{weight}+smooth({alpha})" + ("+agree" if agree else "")
    return Rules(name, vector_weight=weight, smooth_fused=True, smooth_alpha=alpha, agree=agree)


CANDIDATES = (
    Setting(PLAIN),  # the baseline: a plain RRF (k = 60) of the two lists, as a client would fuse them
    Setting(PLAIN, sentences=True),
    Setting(PLAIN, per_document=True),
    Setting(Rules("rrf60+smooth(0.3)", smooth_fused=True, smooth_alpha=0.3)),
    Setting(Rules("rrf20", rrf_k=20)),
    Setting(Rules("rrf60+feedback", feedback=True)),
    Setting(CONVEX),
    Setting(CONVEX, sentences=True, per_document=True),
    Setting(smoothed(0.1), sentences=True, per_document=True),
    Setting(smoothed(0.2)),
    Setting(smoothed(0.2), sentences=True),
    Setting(smoothed(0.2), per_document=True),
    Setting(smoothed(0.2), sentences=True, per_document=True),
    Setting(smoothed(0.2, agree=True), sentences=True, per_document=True),
    Setting(smoothed(0.2, weight=0.25), sentences=True, per_document=True),
    Setting(smoothed(0.2, weight=0.5), sentences=True, per_document=True),
    Setting(smoothed(0.3), sentences=True, per_document=True),
    Setting(OLD_MEMORY),  # memory's design before #25
    Setting(OLD_DOCUMENTS, sentences=True),  # documents' design before #25
)


@contextmanager
def applied(engram: Engram, setting: Setting) -> Iterator[None]:
    """`setting` meanwhile: its rules on the engine's index, its query-vector and grouping choices (two
    module constants the product never changes)."""
    saved = engram.index.rules, search_rules.SENTENCE_MEAN, knowledge_search.PER_DOCUMENT
    engram.index.rules = setting.rules
    search_rules.SENTENCE_MEAN = setting.sentences
    knowledge_search.PER_DOCUMENT = setting.per_document
    try:
        yield
    finally:
        engram.index.rules, search_rules.SENTENCE_MEAN, knowledge_search.PER_DOCUMENT = saved


# -- the collections ------------------------------------------------------------------------------------


@dataclass
class Documents:
    context: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def judged(self) -> list[str]:
        return [q for q in self.queries if q in self.qrels]


def ingest_defaults(engram: Engram, principal: Any, name: str, data: Path) -> Documents:
    """A collection through knowledge_bulk_ingest with a client's defaults (no chunking arguments)."""
    corpus, queries, qrels = load(data)
    bulk = find("knowledge_bulk_ingest")
    assert bulk
    caller = engram.identity.enter(principal, name, ANY, "bench")
    empty = 0  # cranfield has a few documents with no text: refused, as a client's would be
    for i in range(0, len(corpus), 100):
        docs = [{"title": d["title"], "content": d["text"], "metadata": {"beir_id": d["_id"]}}
                for d in corpus[i : i + 100]]  # fmt: skip
        out = bulk.run(
            engram, caller, bulk.input.model_validate({"collection": name, "documents": docs}), lambda *_: None
        )
        assert isinstance(out, dict)
        empty += sum(e["error"] == "document: empty document" for e in out["errors"])
        assert len(out["errors"]) == sum(e["error"] == "document: empty document" for e in out["errors"]), out
    engram.queue.join()
    print(f"  ingested {name}: {len(corpus) - empty} documents ({empty} empty)", file=sys.stderr, flush=True)
    return Documents(name, queries, dict(qrels))


def distinct(results: list[dict[str, Any]]) -> list[str]:
    """A client's ranking of documents: each where its first result is."""
    return list(dict.fromkeys(str(r["metadata"]["beir_id"]) for r in results))


def ndcg10(ranked: list[str], rels: dict[str, int]) -> float:
    return metrics(ranked, rels)["nDCG@10"]


def evidence_recall(got: list[str | None], evidence: set[str], k: int) -> float:
    return len(evidence & {g for g in got[:k] if g}) / len(evidence)


def session_hit(got: list[str | None], evidence: set[str], k: int) -> float:
    return float(bool({session_of(e) for e in evidence} & {session_of(g) for g in got[:k] if g}))


# -- in process: every candidate on every collection ----------------------------------------------------


Scores = dict[str, list[float]]  # collection -> per-query metric


def knowledge_run(engram: Engram, principal: Any, docs: Documents, mode: str, k: int) -> dict[str, list[str]]:
    op = find("knowledge_search")
    assert op
    caller = engram.identity.enter(principal, docs.context, ANY, "bench")
    ranked = {}
    for qid in docs.judged:
        args = op.input.model_validate({"query": docs.queries[qid], "mode": mode, "k": k})
        out = op.run(engram.family_services(op.family), caller, args, lambda *_: None)
        assert isinstance(out, dict)
        ranked[qid] = distinct(out["results"])
    return ranked


def memory_run(engram: Engram, stored: Stored, convs: list[dict[str, Any]], mode: str) -> list[list[str | None]]:
    op = find("memory_recall")
    assert op
    got = []
    for ctx, conv in zip(stored.contexts, convs, strict=True):
        caller = engram.identity.enter(stored.principal, ctx, op.principals, op.name)
        for qa in conv["qa"]:
            if stored.evidence(qa):
                args = op.input.model_validate({"query": qa["question"], "k": MEMORY_K, "mode": mode})
                out = op.run(engram.family_services(op.family), caller, args, lambda *_: None)
                assert isinstance(out, dict)
                got.append([stored.dia(r["id"]) for r in out["results"]])
    return got


def questions(stored: Stored, convs: list[dict[str, Any]]) -> list[set[str]]:
    return [stored.evidence(qa) for conv in convs for qa in conv["qa"] if stored.evidence(qa)]


LOCOMO_FIGURES = ("recall@5", "recall@10", "session@5", "session@10")


def locomo_figures(got: list[list[str | None]], evidence: list[set[str]]) -> dict[str, float]:
    pairs = list(zip(got, evidence, strict=True))
    return {
        f"{what}@{k}": mean([f(g, e, k) for g, e in pairs])
        for what, f in (("recall", evidence_recall), ("session", session_hit))
        for k in (5, 10)
    }


def score_setting(
    engram: Engram, principal: Any, docs: dict[str, Documents], stored: Stored, convs: list[dict[str, Any]]
) -> Callable[[Setting], tuple[Scores, dict[str, Any]]]:
    """A candidate's per-query metric on every collection, its LoCoMo figures, and the floors it must meet
    there: on documents a plain RRF (k = 60) of its own bm25 and vector results as a client receives them
    (k = 30, distinct documents), on LoCoMo its better single list at each figure."""
    evidence = questions(stored, convs)
    floors_of: dict[bool, dict[str, Any]] = {}  # the single lists depend on the query vector's rule only

    def floors(sentences: bool) -> dict[str, Any]:
        if sentences not in floors_of:
            with applied(engram, Setting(PLAIN, sentences=sentences)):
                out: dict[str, Any] = {}
                for name, d in docs.items():
                    bm = knowledge_run(engram, principal, d, "bm25", CLIENT_K)
                    vec = knowledge_run(engram, principal, d, "vector", CLIENT_K)
                    out[name] = mean([ndcg10(rrf60(bm[q], vec[q]), d.qrels[q]) for q in d.judged])
                single = [locomo_figures(memory_run(engram, stored, convs, m), evidence) for m in ("bm25", "vector")]
                out["locomo"] = {f: max(x[f] for x in single) for f in LOCOMO_FIGURES}
            floors_of[sentences] = out
        return floors_of[sentences]

    def score(setting: Setting) -> tuple[Scores, dict[str, Any]]:
        floor = floors(setting.sentences)
        t0 = time.perf_counter()
        with applied(engram, setting):
            scores: Scores = {}
            for name, d in docs.items():
                ranked = knowledge_run(engram, principal, d, "hybrid", CLIENT_K)
                scores[name] = [ndcg10(ranked[q], d.qrels[q]) for q in d.judged]
            got = memory_run(engram, stored, convs, "hybrid")
        scores["locomo"] = [evidence_recall(g, e, 10) for g, e in zip(got, evidence, strict=True)]
        figures = locomo_figures(got, evidence)
        meets = {name: mean(scores[name]) >= floor[name] - 1e-9 for name in docs}
        meets["locomo"] = all(figures[f] >= floor["locomo"][f] - 1e-9 for f in LOCOMO_FIGURES)
        extra = {
            "locomo": figures,
            "floors": floor,
            "meets_floor": meets,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(f"  {setting.name}: " + ", ".join(f"{c} {mean(v):.4f}" for c, v in scores.items()) + f" {meets}",
              file=sys.stderr, flush=True)  # fmt: skip
        return scores, extra

    return score


def mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def bootstrap(deltas: list[float], seed: int = 25) -> tuple[float, float]:
    """The paired-bootstrap 95 % interval of the mean of per-query deltas."""
    d = np.asarray(deltas, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(RESAMPLES, len(d)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def simpler(s: Setting) -> tuple[int, float, str]:
    """What breaks a tie: fewer refinements, then weaker smoothing (nearer the plain lists)."""
    return s.complexity, s.rules.smooth_alpha if s.rules.smooth_fused else 0.0, s.name


def protocol(results: dict[str, Scores], settings: list[Setting], meets: dict[str, dict[str, bool]]) -> dict[str, Any]:
    """Each fold: among the settings that meet every floor on the two dev collections, the one with the best
    mean delta there (within TIE of it, the simpler), and how it does on the held-out one. Then the setting
    that ships: it meets every floor everywhere and is not worse than the baseline on any collection beyond
    its 95 % interval; the best mean delta of those, within TIE the simpler."""
    base = results[CANDIDATES[0].name]
    table: dict[str, Any] = {}
    for s in settings:
        row: dict[str, Any] = {}
        for c in COLLECTIONS:
            deltas = [a - b for a, b in zip(results[s.name][c], base[c], strict=True)]
            lo, hi = bootstrap(deltas)
            row[c] = {"mean": round(mean(results[s.name][c]), 4), "delta": round(mean(deltas), 4),
                      "ci95": [round(lo, 4), round(hi, 4)], "meets_floor": meets[s.name][c]}  # fmt: skip
        table[s.name] = row

    def holds(name: str, c: str) -> bool:
        r = table[name][c]
        return bool(r["delta"] >= 0 or r["ci95"][0] <= 0 <= r["ci95"][1])

    def best(pool: list[Setting], on: list[str]) -> tuple[Setting, float]:
        gain = {s.name: mean([table[s.name][c]["delta"] for c in on]) for s in pool}
        top = max(gain.values())
        chosen = min((s for s in pool if gain[s.name] >= top - TIE), key=simpler)
        return chosen, gain[chosen.name]

    folds = {}
    for held in COLLECTIONS:
        dev = [c for c in COLLECTIONS if c != held]
        # none meeting its floors on the dev collections: the plain fusion, as the issue says to ship then
        pool = [s for s in settings if all(meets[s.name][c] for c in dev)] or settings[:1]
        chosen, gain = best(pool, dev)
        row = table[chosen.name][held]
        folds[held] = {"chosen_on": dev, "chosen": chosen.name, "dev_delta": round(gain, 4),
                       "held_out_delta": row["delta"], "held_out_ci95": row["ci95"], "holds": holds(chosen.name, held),
                       "meets_floor": row["meets_floor"]}  # fmt: skip
    eligible = [s for s in settings if all(meets[s.name][c] and holds(s.name, c) for c in COLLECTIONS)]
    shipped = best(eligible, list(COLLECTIONS))[0].name if eligible else None
    return {"baseline": CANDIDATES[0].name, "settings": table, "folds": folds, "ships": shipped}


# -- over HTTP: the defaults, as a client receives them -------------------------------------------------


def mcp_call(
    http: httpx.Client, url: str, context: str, tool: str, args: dict[str, Any], key: str | None = None
) -> dict[str, Any]:
    """A tool's structured result in `context` (with `key` instead of the client's own, if given)."""
    headers = {"X-Engram-Context": context} | ({"Authorization": f"Bearer {key}"} if key else {})
    out = latency.mcp_call(http, url, tool, args, headers)
    assert not out.get("isError"), out
    return dict(out["structuredContent"])


def http_defaults(
    data_dir: str, keys: tuple[str, str], docs: dict[str, Documents], stored: Stored, convs: list[dict[str, Any]]
) -> dict[str, Any]:
    """(keys: the documents' and the conversations')"""
    rows: dict[str, Any] = {}
    evidence = questions(stored, convs)
    with serve(data_dir) as url, httpx.Client(headers={"Authorization": f"Bearer {keys[0]}"}, timeout=60) as http:
        for name, d in docs.items():
            ranked: dict[str, dict[str, list[str]]] = {}
            times: list[float] = []
            for mode in ("bm25", "vector", "hybrid"):
                ranked[mode] = {}
                for qid in d.judged:
                    t = time.perf_counter()
                    out = mcp_call(http, url, d.context, "knowledge_search",
                                   {"query": d.queries[qid], "mode": mode, "k": CLIENT_K})  # fmt: skip
                    if mode == "hybrid":
                        times.append((time.perf_counter() - t) * 1000)
                    ranked[mode][qid] = distinct(out["results"])
            ranked["rrf60"] = {q: rrf60(ranked["bm25"][q], ranked["vector"][q]) for q in d.judged}
            per = {m: [ndcg10(r[q], d.qrels[q]) for q in d.judged] for m, r in ranked.items()}
            rows[name] = {m: round(mean(v), 4) for m, v in per.items()}
            lo, hi = bootstrap([a - b for a, b in zip(per["hybrid"], per["rrf60"], strict=True)])
            rows[name]["hybrid_minus_rrf60_ci95"] = [round(lo, 4), round(hi, 4)]
            rows[name]["hybrid_p50_ms"], rows[name]["hybrid_p99_ms"] = pct(times, 50), pct(times, 99)
            print(f"  http {name}: {rows[name]}", file=sys.stderr, flush=True)
        got: dict[str, list[list[str | None]]] = {}
        for mode in ("bm25", "vector", "hybrid"):
            got[mode] = []
            for ctx, conv in zip(stored.contexts, convs, strict=True):
                for qa in conv["qa"]:
                    if stored.evidence(qa):
                        args = {"query": qa["question"], "k": MEMORY_K, "mode": mode}
                        out = mcp_call(http, url, ctx, "memory_recall", args, keys[1])
                        got[mode].append([stored.dia(r["id"]) for r in out["results"]])
        lists = [[[x for x in dict.fromkeys(g) if x] for g in got[m]] for m in ("bm25", "vector")]
        got["rrf60"] = [list(rrf60(b, v)) for b, v in zip(*lists, strict=True)]
        rows["locomo"] = {
            m: {
                f"{what}@{k}": round(mean([f(g, e, k) for g, e in zip(got[m], evidence, strict=True)]), 4)
                for what, f in (("recall", evidence_recall), ("session", session_hit))
                for k in (5, 10)
            }
            for m in got
        }
        print(f"  http locomo: {rows['locomo']}", file=sys.stderr, flush=True)
    return rows


def run(settings: tuple[Setting, ...] = CANDIDATES) -> dict[str, Any]:
    convs = json.loads(LOCOMO.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), recall_cache_size=0))
        key, principal = engram.identity.create_key(["cranfield", "cisi"], "agent", ["bench"])
        docs = {"cranfield": ingest_defaults(engram, principal, "cranfield", DATA),
                "cisi": ingest_defaults(engram, principal, "cisi", CISI)}  # fmt: skip
        stored = store_all(engram, convs)
        score = score_setting(engram, principal, docs, stored, convs)
        results, extra = {}, {}
        for s in settings:
            results[s.name], extra[s.name] = score(s)
        meets = {name: e.pop("meets_floor") for name, e in extra.items()}
        out = protocol(results, list(settings), meets) if settings else {}
        for name, e in extra.items():
            out["settings"][name]["more"] = e
        memory_key = engram.identity.create_key(stored.contexts, "agent", ["locomo"])[0]
        del engram, score
        out["http_defaults"] = http_defaults(tmp, (key, memory_key), docs, stored, convs)
    return out


def report(out: dict[str, Any]) -> str:
    """The protocol's table as markdown (for bench/RESULTS.md)."""
    lines = ["| setting | " + " | ".join(f"{c} (Δ, 95 % CI)" for c in COLLECTIONS) + " |",
             "|---|" + "---|" * len(COLLECTIONS)]  # fmt: skip
    for name, row in out["settings"].items():
        cells = [f"{row[c]['mean']:.3f} ({row[c]['delta']:+.3f}, {row[c]['ci95'][0]:+.3f}..{row[c]['ci95'][1]:+.3f})"
                 + ("" if row[c]["meets_floor"] else " ✗") for c in COLLECTIONS]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| held out | chosen on | chosen | dev Δ | held-out Δ (95 % CI) | holds |",
        "|---|---|---|---|---|---|",
    ]
    for held, f in out["folds"].items():
        lo, hi = f["held_out_ci95"]
        holds = ("yes" if f["holds"] else "no") + ("" if f["meets_floor"] else ", below its floor")
        lines.append(f"| {held} | {' + '.join(f['chosen_on'])} | {f['chosen']} | {f['dev_delta']:+.4f} | "
                     f"{f['held_out_delta']:+.4f} ({lo:+.4f}..{hi:+.4f}) | {holds} |")  # fmt: skip
    lines += ["", f"ships: {out['ships']} (✗: below its floor on that collection)"]
    return "\n".join(lines)


if __name__ == "__main__":
    result = run()
    print(json.dumps(result, indent=2))
    print(report(result), file=sys.stderr)
