"""#53: LoCoMo evidence recall@k with the time words in a question read (`memory_recall` as a client calls it:
a time the words name is a preference, `engram.families.memory.reading.preferred`) and without (the same search on
the whole question), per category, with the clock at each conversation's end (an hour after its last session:
"in June" is the June before it). Category 2 is LoCoMo's temporal questions.

The preference's settings (pool, boost, lag) were chosen on conversations 0-6 (`DEV`) and are checked on 7-9
(`HELD_OUT`); `GRID=1` prints the grid it was chosen from."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.locomo import DATA, session_time, store_all
from engram.families import find
from engram.families.memory import reading
from engram.kernel.clock import FixedClock
from engram.search import time_phrases
from engram.settings import Settings
from engram.wiring import build_local

CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
DEV, HELD_OUT = range(0, 7), range(7, 10)
GRID = [(pool, boost, lag) for pool in (1, 2, 3) for boost in (0.1, 0.25, 0.5, 1.0) for lag in (0, 7, 31)]


@contextmanager
def setting(pool: int, boost: float, lag: int) -> Iterator[None]:
    saved = reading.TIME_POOL, time_phrases.BOOST, time_phrases.LAG
    reading.TIME_POOL, time_phrases.BOOST, time_phrases.LAG = pool, boost, timedelta(days=lag)
    try:
        yield
    finally:
        reading.TIME_POOL, time_phrases.BOOST, time_phrases.LAG = saved


def table(scores: dict[str, dict[int, list[float]]]) -> dict[str, dict[str, float]]:
    return {
        CATEGORIES.get(cat, cat): {f"@{k}": round(sum(v) / len(v), 3) for k, v in sorted(d.items())}
        for cat, d in sorted(scores.items())
    }


def run(data_path: Path = DATA, ks: tuple[int, ...] = (5, 10), mode: str = "hybrid") -> dict[str, Any]:
    convs = json.loads(data_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), recall_cache_size=0))
        stored = store_all(engram, convs)
        op = find("memory_recall")
        assert op

        def evaluate(side: str, convs_at: range) -> tuple[dict[str, dict[int, list[float]]], int]:
            scores: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
            read = 0
            for i in convs_at:
                ctx, conv = stored.contexts[i], convs[i]
                last = max(session_time(v) for key, v in conv["conversation"].items() if key.endswith("_date_time"))
                engram.memory.clock = FixedClock(last + timedelta(hours=1))
                caller = engram.identity.enter(stored.principal, ctx, op.principals, op.name)
                for qa in conv["qa"]:
                    ev = stored.evidence(qa)
                    if not ev:
                        continue
                    if side == "after":
                        args = op.input.model_validate({"query": qa["question"], "k": max(ks), "mode": mode})
                        out = op.run(engram.family_services(op.family), caller, args, lambda *_: None)
                        read += "time" in out  # type: ignore[operator]
                    else:
                        out = engram.memory.recall(caller, qa["question"], max(ks), None, None, mode)  # type: ignore[arg-type]
                    got = [stored.dia(r["id"]) for r in out["results"]]  # type: ignore[index]
                    for k in ks:
                        s = len(ev & {g for g in got[:k] if g}) / len(ev)
                        scores[str(qa["category"])][k].append(s)
                        scores["all"][k].append(s)
            return scores, read

        t0 = time.perf_counter()
        out: dict[str, Any] = {"mode": mode, "setting": {"pool": reading.TIME_POOL, "boost": time_phrases.BOOST,
                                                         "lag_days": time_phrases.LAG.days}}  # fmt: skip
        for split, convs_at in (("dev", DEV), ("held_out", HELD_OUT), ("all", range(len(convs)))):
            before, _ = evaluate("before", convs_at)
            after, read = evaluate("after", convs_at)
            asked = {CATEGORIES.get(c, c): len(d[max(ks)]) for c, d in sorted(after.items())}
            out[split] = {"before": table(before), "after": table(after), "time_read_in": read, "questions": asked}
        if os.environ.get("GRID"):
            grid = []
            for pool, boost, lag in GRID:
                with setting(pool, boost, lag):
                    rows = {
                        split: table(evaluate("after", at)[0]) for split, at in (("dev", DEV), ("held_out", HELD_OUT))
                    }
                grid.append({"pool": pool, "boost": boost, "lag": lag,
                             **{s: {c: v["@10"] for c, v in r.items()} for s, r in rows.items()}})  # fmt: skip
                print(json.dumps(grid[-1]), file=sys.stderr, flush=True)
            out["grid"] = grid
        out["seconds"] = round(time.perf_counter() - t0, 1)
        return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
