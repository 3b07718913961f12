"""LoCoMo evidence recall through memory_store / memory_recall (in process, through the operations)."""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fusion import rrf60
from engram.families import find
from engram.settings import Settings
from engram.wiring import Engram, build_local

MODES = ("bm25", "vector", "hybrid")
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"


def session_of(dia_id: str) -> str:
    """The session of a LoCoMo dialogue id ("D3:12": session 3)."""
    return dia_id.split(":", 1)[0]


def session_time(text: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(re.sub(r"\s+", " ", text.strip()), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def run(data_path: Path = DATA, ks: tuple[int, ...] = (5, 10), modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    convs = json.loads(data_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), recall_cache_size=0))
        return evaluate(engram, convs, ks, modes)


@dataclass
class Stored:
    """LoCoMo's conversations in an Engram, one context each."""

    contexts: list[str]
    principal: Any
    turns: int
    seconds: float
    dia_of: dict[str, str]  # turn id -> LoCoMo dialogue id
    source: dict[str, str]  # attribute id -> the turn it was extracted from

    def dia(self, hit_id: str) -> str | None:
        """The dialogue a recall result comes from (an attribute: the turn it was said in)."""
        return self.dia_of.get(self.source.get(hit_id, hit_id))

    def evidence(self, qa: dict[str, Any]) -> set[str]:
        return {e.strip() for e in qa.get("evidence", []) if e.strip()}


def store_all(engram: Engram, convs: list[dict[str, Any]]) -> Stored:
    contexts = [f"locomo-{i}" for i in range(len(convs))]
    _, principal = engram.identity.create_key(contexts, "management", ["locomo"])
    store = find("memory_store_batch")
    assert store
    t0, turns = time.perf_counter(), 0
    dia_of: dict[str, str] = {}
    for ctx, conv in zip(contexts, convs, strict=True):
        c = conv["conversation"]
        caller = engram.identity.enter(principal, ctx, store.principals, store.name)
        n = 1
        while f"session_{n}" in c:
            when = session_time(c[f"session_{n}_date_time"])
            batch = [
                {
                    "content": t["text"],
                    "session_id": f"session_{n}",
                    "said_at": when.isoformat(),
                    "metadata": {"speaker": t["speaker"], "dia_id": t["dia_id"]},
                }
                for t in c[f"session_{n}"]
            ]
            for i in range(0, len(batch), 100):
                args = store.input.model_validate({"turns": batch[i : i + 100]})
                out = store.run(engram.family_services(store.family), caller, args, lambda *_: None)
                assert isinstance(out, dict)
                for r, t in zip(out["results"], batch[i : i + 100], strict=True):
                    dia_of[r["turn_id"]] = t["metadata"]["dia_id"]
            turns += len(batch)
            n += 1
        print(f"  stored {ctx}: {turns} turns so far", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    source = {}
    for ctx in contexts:
        cursor = None
        while True:
            page = engram.records.query(ctx, "attribute", cursor=cursor, limit=1000)
            source.update({i.id: i.data["source_turn"] for i in page.items})
            if page.cursor is None:
                break
            cursor = page.cursor
    return Stored(contexts, principal, turns, seconds, dia_of, source)


def recall(engram: Engram, stored: Stored, ctx: str, query: str, k: int, mode: str) -> list[dict[str, Any]]:
    """memory_recall's results for `query` in context `ctx`, through the operation."""
    op = find("memory_recall")
    assert op
    caller = engram.identity.enter(stored.principal, ctx, op.principals, op.name)
    out = op.run(
        engram.family_services(op.family),
        caller,
        op.input.model_validate({"query": query, "k": k, "mode": mode}),
        lambda *_: None,
    )
    assert isinstance(out, dict)
    return list(out["results"])


def evaluate(
    engram: Engram, convs: list[dict[str, Any]], ks: tuple[int, ...], modes: tuple[str, ...]
) -> dict[str, Any]:
    stored = store_all(engram, convs)
    contexts = stored.contexts
    results: dict[str, Any] = {"turns": stored.turns, "store_seconds": round(stored.seconds, 1), "modes": {}}
    kmax = max(ks)
    lists: dict[tuple[str, str, int], list[str]] = {}  # the single lists' top 100, for rrf60
    fused = ("rrf60",) if {"bm25", "vector"} <= set(modes) else ()
    for mode in (*modes, *fused):
        per_cat: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        sessions: dict[int, list[float]] = defaultdict(list)  # the right session among the top k (any turn of it)
        t0, nq = time.perf_counter(), 0
        for ctx, conv in zip(contexts, convs, strict=True):
            for n, qa in enumerate(conv["qa"]):
                ev = stored.evidence(qa)
                if not ev:
                    continue
                got: list[str | None]
                if mode == "rrf60":  # a plain RRF (k = 60) of the bm25 and vector lists: hybrid's floor
                    got = list(rrf60(lists["bm25", ctx, n], lists["vector", ctx, n]))
                else:
                    k = 100 if mode in ("bm25", "vector") else kmax
                    got = [stored.dia(r["id"]) for r in recall(engram, stored, ctx, qa["question"], k, mode)]
                    lists[mode, ctx, n] = list(dict.fromkeys(d for d in got if d))
                nq += 1
                for k in ks:
                    seen = {g for g in got[:k] if g}
                    score = len(ev & seen) / len(ev)
                    per_cat[str(qa["category"])][k].append(score)
                    per_cat["all"][k].append(score)
                    sessions[k].append(float(bool({session_of(e) for e in ev} & {session_of(g) for g in seen})))
        results["modes"][mode] = {
            "queries": nq,
            "ms_per_query": round((time.perf_counter() - t0) * 1000 / max(nq, 1), 2),
            "recall": {
                cat: {f"@{k}": round(sum(v) / len(v), 3) for k, v in d.items()} for cat, d in sorted(per_cat.items())
            },
            "session_hit": {f"@{k}": round(sum(v) / len(v), 3) for k, v in sessions.items()},
        }
        m = results["modes"][mode]
        print(f"  {mode}: {m['recall']['all']} right session: {m['session_hit']}", file=sys.stderr, flush=True)
    return results


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))


def turns_and_questions() -> tuple[list[str], list[str]]:
    """Every LoCoMo turn's text and every QA question, in file order (the latency benchmarks' load)."""
    data = json.loads(DATA.read_text())
    turns = [
        t["text"]
        for c in data
        for k, v in c["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]
    return turns, [q["question"] for c in data for q in c["qa"]]
