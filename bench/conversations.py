"""LoCoMo through Cortex's conversation tools (`BENCH=conversations`): each conversation one thread (in a
context of its own, as `BENCH=locomo` stores it), every
turn appended (`conversation_append`, the speaker in its metadata); evidence recall@10 of each question
through `conversation_search` in its thread — beside `memory_recall`'s on the same data (`BENCH=locomo`:
the same retrieval through the other door) — then again after `conversation_summarize` with keep_recent 10
(nothing may be lost). In process, through the operations."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import locomo
from engram.families import find
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import build_local


def run() -> dict[str, Any]:
    convs = json.loads(locomo.DATA.read_text())
    append, search, summarize = find("conversation_append"), find("conversation_search"), find("conversation_summarize")
    assert append and search and summarize
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), recall_cache_size=0))
        # one context per conversation, as BENCH=locomo stores them, so the two doors see the same data
        contexts = [f"locomo-{n}" for n in range(len(convs))]
        _, principal = engram.identity.create_key(contexts, "agent", ["locomo"])
        callers = [engram.identity.enter(principal, ctx, ANY, "bench") for ctx in contexts]
        dia_of: dict[str, str] = {}
        append_ms: list[float] = []
        t0 = time.perf_counter()
        for n, conv in enumerate(convs):
            c, s = conv["conversation"], 1
            while f"session_{s}" in c:
                for t in c[f"session_{s}"]:
                    args = {"thread_id": f"conv-{n}", "role": "user", "content": t["text"],
                            "metadata": {"speaker": t["speaker"], "dia_id": t["dia_id"]}}  # fmt: skip
                    started = time.perf_counter()
                    out = append.run(
                        engram.family_services(append.family),
                        callers[n],
                        append.input.model_validate(args),
                        lambda *_: None,
                    )
                    append_ms.append((time.perf_counter() - started) * 1000)
                    assert isinstance(out, dict)
                    dia_of[out["message_id"]] = t["dia_id"]
                s += 1
            print(f"  appended conv-{n}: {len(append_ms)} messages so far", file=sys.stderr, flush=True)
        load_s = time.perf_counter() - t0
        p50, mean = round(statistics.median(append_ms), 2), round(statistics.mean(append_ms), 2)
        result: dict[str, Any] = {
            "messages": len(append_ms),
            "append_ms_in_process": {"p50": p50, "mean": mean},
            "load_seconds": round(load_s, 1),
        }

        def recall_at_10() -> tuple[float, float]:
            scores, times = [], []
            for n, conv in enumerate(convs):
                for qa in conv["qa"]:
                    ev = {e.strip() for e in qa.get("evidence", []) if e.strip()}
                    if not ev:
                        continue
                    args = {"query": qa["question"], "thread_id": f"conv-{n}", "limit": 10}
                    started = time.perf_counter()
                    out = search.run(
                        engram.family_services(search.family),
                        callers[n],
                        search.input.model_validate(args),
                        lambda *_: None,
                    )
                    times.append((time.perf_counter() - started) * 1000)
                    assert isinstance(out, dict)
                    seen = {dia_of.get(r["message_id"]) for r in out["results"]}
                    scores.append(len(ev & seen) / len(ev))
            return round(sum(scores) / len(scores), 3), round(statistics.median(times), 2)

        result["recall@10"], result["search_ms_in_process_p50"] = recall_at_10()
        print(f"  conversation_search recall@10 {result['recall@10']}", file=sys.stderr, flush=True)
        for n in range(len(convs)):
            args = {"thread_id": f"conv-{n}", "keep_recent": 10}
            summarize.run(
                engram.family_services(summarize.family),
                callers[n],
                summarize.input.model_validate(args),
                lambda *_: None,
            )
        result["recall@10_after_summarize"], _ = recall_at_10()
        print(f"  after summarize: {result['recall@10_after_summarize']}", file=sys.stderr, flush=True)
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
