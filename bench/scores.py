"""What a result's score means, measured on every dev collection (`BENCH=scores`).

A score in [0, 1] should keep good hits and drop bad ones at the same threshold on any collection and in
any mode (README "Scores"). Per collection and mode, over the top 10 results:
- `relevant_kept`: of the hits the collection's judgements call relevant (cranfield, CISI) or that are a
  question's evidence (LoCoMo), the share scoring at least THRESHOLD;
- `offtopic_dropped`: of the hits of queries that cannot match anything (the other collection's queries:
  CISI's on cranfield and cranfield's on CISI; a LoCoMo question asked of another conversation's memory,
  where it is about someone else), the share scoring below THRESHOLD;
- the median score of each.
Everything goes through the operations users call (knowledge_search, memory_recall), in process.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import cranfield, locomo
from engram.families import find
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import Engram, build_local

THRESHOLD = 0.5  # Spectron's example threshold
MODES = ("bm25", "vector", "hybrid")


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), recall_cache_size=0))
        out = _documents(engram)
        out["locomo"] = _memory(engram)
    return out


def _summary(relevant: list[float], offtopic: list[float]) -> dict[str, Any]:
    return {
        "relevant_kept": round(sum(s >= THRESHOLD for s in relevant) / max(len(relevant), 1), 3),
        "offtopic_dropped": round(sum(s < THRESHOLD for s in offtopic) / max(len(offtopic), 1), 3),
        "median_relevant": round(statistics.median(relevant), 3) if relevant else None,
        "median_offtopic": round(statistics.median(offtopic), 3) if offtopic else None,
        "hits": [len(relevant), len(offtopic)],
    }


def _documents(engram: Engram) -> dict[str, Any]:
    search = find("knowledge_search")
    assert search
    loaded, callers = {}, {}
    for name, path in (("cranfield", cranfield.DATA), ("cisi", cranfield.CISI)):
        corpus, queries, qrels = loaded[name] = cranfield.load(path)
        _, principal = engram.identity.create_key([name], "agent", ["bench"])
        callers[name] = engram.identity.enter(principal, name, ANY, "bench")
        cranfield._ingest(engram, callers[name], corpus)

    def top(name: str, query: str, mode: str) -> list[dict[str, Any]]:
        args = search.input.model_validate({"query": query, "mode": mode, "k": 10})
        out = search.run(engram.family_services(search.family), callers[name], args, lambda *_: None)
        assert isinstance(out, dict)
        return list(out["results"])

    result: dict[str, Any] = {}
    for name, other in (("cranfield", "cisi"), ("cisi", "cranfield")):
        _, queries, qrels = loaded[name]
        _, other_queries, other_qrels = loaded[other]
        result[name] = {}
        for mode in MODES:
            relevant = [
                r["score"]
                for qid in queries
                if qid in qrels
                for r in top(name, queries[qid], mode)
                if qrels[qid].get(str(r["metadata"]["beir_id"]), 0) > 0
            ]
            asked = [other_queries[q] for q in other_queries if q in other_qrels]
            offtopic = [r["score"] for query in asked for r in top(name, query, mode)]
            result[name][mode] = _summary(relevant, offtopic)
            print(f"  {name} {mode}: {result[name][mode]}", file=sys.stderr, flush=True)
    return result


def _memory(engram: Engram) -> dict[str, Any]:
    convs = json.loads(locomo.DATA.read_text())
    stored = locomo.store_all(engram, convs)
    result: dict[str, Any] = {}
    for mode in MODES:
        relevant: list[float] = []
        offtopic: list[float] = []
        for n, (ctx, conv) in enumerate(zip(stored.contexts, convs, strict=True)):
            elsewhere = stored.contexts[(n + 1) % len(stored.contexts)]
            for qa in _with_evidence(conv["qa"]):
                ev = stored.evidence(qa)
                hits = locomo.recall(engram, stored, ctx, qa["question"], 10, mode)
                relevant += [r["score"] for r in hits if stored.dia(r["id"]) in ev]
                offtopic += [r["score"] for r in locomo.recall(engram, stored, elsewhere, qa["question"], 10, mode)]
        result[mode] = _summary(relevant, offtopic)
        print(f"  locomo {mode}: {result[mode]}", file=sys.stderr, flush=True)
    return result


def _with_evidence(qas: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [qa for qa in qas if any(e.strip() for e in qa.get("evidence", []))]


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
