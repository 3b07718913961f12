"""LoCoMo evidence recall through memory_store / memory_recall (in process, through the operations)."""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram.operations import find
from engram.settings import Settings
from engram.wiring import Engram, build_local

MODES = ("bm25", "vector", "hybrid")
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"


def session_time(text: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(re.sub(r"\s+", " ", text.strip()), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def run(data_path: Path = DATA, ks: tuple[int, ...] = (5, 10), modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    convs = json.loads(data_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), recall_cache_size=0))
        return evaluate(engram, convs, ks, modes)


def evaluate(
    engram: Engram, convs: list[dict[str, Any]], ks: tuple[int, ...], modes: tuple[str, ...]
) -> dict[str, Any]:
    contexts = [f"locomo-{i}" for i in range(len(convs))]
    _, principal = engram.identity.create_key(contexts, "management", ["locomo"])
    store, recall = find("memory_store_batch"), find("memory_recall")
    assert store and recall
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
                out = store.run(engram, caller, args, lambda *_: None)
                assert isinstance(out, dict)
                for r, t in zip(out["results"], batch[i : i + 100], strict=True):
                    dia_of[r["turn_id"]] = t["metadata"]["dia_id"]
            turns += len(batch)
            n += 1
        print(f"  stored {ctx}: {turns} turns so far", file=sys.stderr, flush=True)
    store_s = time.perf_counter() - t0
    # attributes cite the turn they were extracted from
    source = {}
    for ctx in contexts:
        cursor = None
        while True:
            page = engram.records.query(ctx, "attribute", cursor=cursor, limit=1000)
            source.update({i.id: i.data["source_turn"] for i in page.items})
            if page.cursor is None:
                break
            cursor = page.cursor
    results: dict[str, Any] = {"turns": turns, "store_seconds": round(store_s, 1), "modes": {}}
    kmax = max(ks)
    for mode in modes:
        per_cat: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        t0, nq = time.perf_counter(), 0
        for ctx, conv in zip(contexts, convs, strict=True):
            caller = engram.identity.enter(principal, ctx, recall.principals, recall.name)
            for qa in conv["qa"]:
                ev = {e.strip() for e in qa.get("evidence", []) if e.strip()}
                if not ev:
                    continue
                args = recall.input.model_validate({"query": qa["question"], "k": kmax, "mode": mode})
                out = recall.run(engram, caller, args, lambda *_: None)
                assert isinstance(out, dict)
                got = [dia_of.get(source.get(r["id"], r["id"])) for r in out["results"]]
                nq += 1
                for k in ks:
                    seen = {g for g in got[:k] if g}
                    score = len(ev & seen) / len(ev)
                    per_cat[str(qa["category"])][k].append(score)
                    per_cat["all"][k].append(score)
        results["modes"][mode] = {
            "queries": nq,
            "ms_per_query": round((time.perf_counter() - t0) * 1000 / max(nq, 1), 2),
            "recall": {
                cat: {f"@{k}": round(sum(v) / len(v), 3) for k, v in d.items()} for cat, d in sorted(per_cat.items())
            },
        }
        print(f"  {mode}: {results['modes'][mode]['recall']['all']}", file=sys.stderr, flush=True)
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
