"""#54's needle test: LoCoMo's evidence recall@10 (hybrid, through `memory_recall`) with and without `OTHERS` other
real, embedded memories in each conversation's context and scopes (`make bench BENCH=needle`).

Each conversation is stored as `bench.locomo` stores it (the shipped model and extractor); its questions are asked;
then `OTHERS` memories join its context through `memory_store_batch` by the same key (so the same scopes): other
conversations' turns and cranfield's and CISI's sentences, then pairs of them ("A B") — never a turn of that
conversation itself — each embedded by the shipped model (`bench.scale`'s cached vectors for the sentences; the pairs'
own vectors embedded once and cached beside them: `PAIRS` pairs drawn with one seed for every conversation, those
holding one of its turns passed over), read by the rules; and the questions are asked again. Until 2026-12-06 a pair's
vector was the normalised sum of its two sentences' (the scale bench's shortcut): not an embedded memory, and nearer
every query than a real one (a mean lies towards the centre), so it crowded the vector list more than real memories do.
The others are stored in sessions of their own (`other-N`) with no `speaker`: since 2026-12-07 a question that names
one of the conversation's speakers is searched in that speaker's sessions first (`engram.families.memory.named`), so
the others reach such a question only when those sessions hold fewer than k results — as other people's
conversations would, whose speakers have other names (a namesake's sessions would be searched too).

`python -m bench.needle [others]`; with `NEEDLE_DIR` set, the filled folder is kept there and a second run asks the
questions of it again without filling (how a ranking change is tried against the needle in a minute)."""

from __future__ import annotations

import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.locomo import DATA, Stored, recall, store_all
from bench.scale import Cached, Corpus, cached_vectors, corpus
from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder
from engram.families import find
from engram.settings import Settings
from engram.wiring import Engram, build_local

OTHERS = 100_000
K = 10
# pairs drawn once for every conversation (seed, count); each uses those holding none of its own turns
PAIRS = ((54, 80_000), (55, 8_000))


def scores(engram: Engram, stored: Stored, convs: list[dict[str, Any]]) -> dict[str, Any]:
    per_cat: dict[str, list[float]] = {}
    t0, n = time.perf_counter(), 0
    for ctx, conv in zip(stored.contexts, convs, strict=True):
        for qa in conv["qa"]:
            ev = stored.evidence(qa)
            if not ev:
                continue
            got = {stored.dia(r["id"]) for r in recall(engram, stored, ctx, qa["question"], K, "hybrid")}
            score = len(ev & got) / len(ev)
            per_cat.setdefault(str(qa["category"]), []).append(score)
            per_cat.setdefault("all", []).append(score)
            n += 1
    out = {cat: round(sum(v) / len(v), 3) for cat, v in sorted(per_cat.items())}
    return {"recall@10": out, "ms_per_query": round((time.perf_counter() - t0) * 1000 / max(n, 1), 1)}


def narrowed(engram: Engram, stored: Stored, convs: list[dict[str, Any]]) -> dict[str, Any]:
    """The index's own hybrid search over the conversation's turns (the caller's lens, k 10), kept to its two
    speakers' turns (`metadata.speaker`) when the question names one of them, and without that filter: what the
    shipped recall's narrowing (`engram.families.memory.named`: the sessions of the speakers a question names) rests
    on, measured below `memory_recall` (no time words read, no facts). With BM25's statistics within the filter, the
    others cost only what they change in the vector list (the rows of "BM25 within a search's filters" in RESULTS)."""
    import re
    from datetime import UTC, datetime

    from engram.kernel.ports import SearchQuery
    from engram.search.rules import query_vector

    op = find("memory_recall")
    assert op
    out: dict[str, dict[str, list[float]]] = {"plain": {}, "narrowed": {}}
    for n, (ctx, conv) in enumerate(zip(stored.contexts, convs, strict=True)):
        speakers = [conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]]
        lens = engram.memory.identity.read_lens(
            engram.identity.enter(stored.principal, ctx, op.principals, op.name), None
        )
        for qa in conv["qa"]:
            if not (ev := stored.evidence(qa)):
                continue
            named = any(re.search(rf"\b{re.escape(s)}\b", qa["question"]) for s in speakers)
            vec = query_vector(engram.embedder, qa["question"], ranks=True)
            for way, meta in (("plain", {}), ("narrowed", {"speaker": speakers} if named else {})):
                q = SearchQuery(ctx, qa["question"], vec, "hybrid", K, ("turn",), lens, metadata=meta)
                got = {stored.dia(h.id) for h in engram.index.search(q, datetime.now(UTC))}
                for part in ("all", "dev" if n < 7 else "held-out"):
                    out[way].setdefault(part, []).append(len(ev & got) / len(ev))
    return {way: {part: round(sum(v) / len(v), 4) for part, v in parts.items()} for way, parts in out.items()}


def pairs(c: Corpus) -> tuple[list[tuple[int, int]], np.ndarray[Any, Any]]:
    """Pairs of the corpus's sentences (`PAIRS`: blocks of a seed and a count), and each pair's text embedded by the
    shipped model (cached a block at a time)."""
    drawn: list[tuple[int, int]] = []
    vectors = []
    model = OnnxMiniLMEmbedder()
    for seed, n in PAIRS:
        rng = np.random.default_rng(seed)
        block = [(int(a), int(b)) for a, b in rng.integers(0, len(c.texts), (n, 2))]
        texts = [f"{c.texts[a]} {c.texts[b]}" for a, b in block]
        vectors.append(cached_vectors(texts, model, prefix="needle-pairs-", batch=512))
        drawn += block
    return drawn, np.concatenate(vectors)


def others_for(
    c: Corpus, own: set[str], n: int, drawn: list[tuple[int, int]], vectors: np.ndarray[Any, Any]
) -> list[tuple[str, Any]]:
    """`n` memories from the corpus without the conversation's own turns: single sentences, then pairs."""
    pool = [i for i, t in enumerate(c.texts) if t not in own]
    out = [(c.texts[i], c.vectors[i]) for i in pool[:n]]
    for (a, b), v in zip(drawn, vectors, strict=True):
        if len(out) >= n:
            break
        if c.texts[a] not in own and c.texts[b] not in own:
            out.append((f"{c.texts[a]} {c.texts[b]}", v))
    assert len(out) == n, "more pairs needed (PAIRS)"
    return out


def run(others: int = OTHERS) -> dict[str, Any]:
    convs = json.loads(DATA.read_text())
    kept = os.environ.get("NEEDLE_DIR")
    if kept and (Path(kept) / "needle.pkl").exists():  # filled before: ask again
        with (Path(kept) / "needle.pkl").open("rb") as f:
            out, stored = pickle.load(f)
        engram = build_local(Settings(data_dir=Path(kept), recall_cache_size=0))
        out["with_others"] = scores(engram, stored, convs)
        out["delta_all"] = round(out["with_others"]["recall@10"]["all"] - out["alone"]["recall@10"]["all"], 3)
        out["turns_only_with_others"] = narrowed(engram, stored, convs)
        return dict(out)
    with tempfile.TemporaryDirectory() as tmp:
        return filled(Path(kept) if kept else Path(tmp), convs, others)


def filled(data: Path, convs: list[dict[str, Any]], others: int) -> dict[str, Any]:
    c = corpus()
    drawn, pair_vectors = pairs(c)
    engram = build_local(Settings(data_dir=data, recall_cache_size=0))
    stored = store_all(engram, convs)
    out: dict[str, Any] = {"others": others, "alone": scores(engram, stored, convs)}
    out["turns_only_alone"] = narrowed(engram, stored, convs)
    print(f"  alone: {out['alone']} {out['turns_only_alone']}", file=sys.stderr, flush=True)
    del engram
    cached = Cached(OnnxMiniLMEmbedder())
    filler = build_local(Settings(data_dir=data, extractor="rules", recall_cache_size=0), embedder=cached)
    store = find("memory_store_batch")
    assert store
    t0 = time.perf_counter()
    for ctx, conv in zip(stored.contexts, convs, strict=True):
        own = {t["text"].strip() for k, v in conv["conversation"].items() if k.startswith("session_")
               and isinstance(v, list) for t in v}  # fmt: skip
        caller = filler.identity.enter(stored.principal, ctx, store.principals, store.name)
        items = others_for(c, own, others, drawn, pair_vectors)
        for i in range(0, others, 100):
            batch = items[i : i + 100]
            cached.known.update(batch)
            turns = [{"content": text, "session_id": f"other-{(i + j) // 20}"} for j, (text, _) in enumerate(batch)]
            store.run(filler, caller, store.input.model_validate({"turns": turns}), lambda *_: None)
            cached.known.clear()
        print(f"  {ctx}: {others} others stored ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    filler.queue.join()
    del filler
    engram = build_local(Settings(data_dir=data, recall_cache_size=0))
    with (data / "needle.pkl").open("wb") as f:
        pickle.dump((out, stored), f)
    out["with_others"] = scores(engram, stored, convs)
    out["delta_all"] = round(out["with_others"]["recall@10"]["all"] - out["alone"]["recall@10"]["all"], 3)
    out["turns_only_with_others"] = narrowed(engram, stored, convs)
    print(f"  with others: {out['with_others']} {out['turns_only_with_others']}", file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else OTHERS), indent=2))
