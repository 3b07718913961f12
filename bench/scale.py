"""#54: the curve as a context grows — `memory_recall` over HTTP at 10k, 100k (and 1M with `SCALE_MAX=1000000`)
memories in one context: p50 / p99 at the client's k (10), the first query after a restart, the server's peak RSS,
bytes on disk, and write throughput (`memory_store_batch`) while the context grows (`make bench BENCH=scale`).

The texts are real: every LoCoMo turn and every sentence of cranfield's and CISI's documents (~30k distinct),
each embedded once by the shipped model and cached in `bench/out/scale-cache/` (keyed by the texts and the model).
Past those, memory i is two of them joined ("A B"), its vector the normalised sum of theirs — the only thing the
bench makes up (embedding a million texts takes hours here). The fill goes through the product's own write path
(`memory_store_batch`, 100 turns a call, in process) with an embedder that answers from the cache; the server that
is measured is a fresh `engram serve` over the data folder with the real model (queries are embedded for real).

`python -m bench.scale [max]`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.latency import mcp_call, pct
from bench.locomo import turns_and_questions
from engram.adapters.local.ann import MIN_VECTORS
from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder as OnnxEmbedder
from engram.adapters.local.saving import SEGMENT_MIN
from engram.adapters.local.segment import folder as segment_folder
from engram.cli.devserver import start, stop
from engram.families import find
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import build_local

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CACHE = Path(__file__).resolve().parent / "out" / "scale-cache"
SIZES = (10_000, 100_000, 1_000_000)
SAMPLES = 300
BATCH = 100


def sentences() -> list[str]:
    """Every LoCoMo turn and every sentence of cranfield's and CISI's documents, distinct, in a fixed order."""
    turns, _ = turns_and_questions()
    out = dict.fromkeys(t.strip() for t in turns if len(t.strip()) >= 12)
    for name in ("cranfield", "cisi"):
        for line in (DATA / name / "corpus.jsonl").read_text().splitlines():
            text = json.loads(line)["text"]
            for s in re.split(r"(?<=[.?!])\s+", re.sub(r"\s+", " ", text)):
                if len(s) >= 20:
                    out.setdefault(s.strip(), None)
    return list(out)


class Corpus:
    """Memory i: sentence i, then pairs of sentences with the normalised sum of their vectors."""

    def __init__(self, texts: list[str], vectors: np.ndarray[Any, Any]) -> None:
        self.texts, self.vectors = texts, vectors
        self.rng = np.random.default_rng(54)

    def item(self, i: int) -> tuple[str, np.ndarray[Any, Any]]:
        n = len(self.texts)
        if i < n:
            return self.texts[i], self.vectors[i]
        r = np.random.default_rng(i)
        a, b = (int(x) for x in r.integers(0, n, 2))
        v = self.vectors[a] + self.vectors[b]
        return f"{self.texts[a]} {self.texts[b]}", (v / np.linalg.norm(v)).astype(np.float32)


def cached_vectors(texts: list[str], model: OnnxEmbedder, prefix: str = "", batch: int = 256) -> np.ndarray[Any, Any]:
    """`texts` embedded by the shipped model once, then read from `CACHE` (keyed by the texts and the model)."""
    digest = hashlib.sha256(("\n".join(texts) + model.model_id).encode()).hexdigest()[:16]
    path = CACHE / f"{prefix}{digest}.npy"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        parts = [model.embed(texts[i : i + batch]) for i in range(0, len(texts), batch)]
        np.save(path, np.concatenate(parts).astype(np.float32))
        print(f"  embedded {len(texts)} texts in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return np.load(path)


def corpus() -> Corpus:
    texts = sentences()
    return Corpus(texts, cached_vectors(texts, OnnxEmbedder()))


class Cached:
    """An embedder answering from the bench's cache (the shipped model's vectors), the real model otherwise."""

    def __init__(self, real: OnnxEmbedder) -> None:
        self.real, self.model_id, self.dim = real, real.model_id, real.dim
        self.known: dict[str, np.ndarray[Any, Any]] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        """A turn is embedded after the turn before it ("previous\ncontent"): its content's cached vector (the turn
        alone); anything else (the facts the rules read) for real."""
        found = [self.known.get(t.rsplit("\n", 1)[-1]) for t in texts]
        missing = [t for t, v in zip(texts, found, strict=True) if v is None]
        made = iter(list(self.real.embed(missing)) if missing else [])
        return np.stack([v if v is not None else next(made) for v in found])


def filler(data: Path, key: str | None, context: str) -> tuple[Cached, Any, str, Any]:
    """An engine over `data` for a filler (its embedder answering from the cache, the rules reading names), the key
    (made for `context` the first time) and the caller of `context`."""
    cached = Cached(OnnxEmbedder())
    engram = build_local(Settings(data_dir=data, extractor="rules"), embedder=cached)
    if key is None:
        key, principal = engram.identity.create_key([context], "agent", ["org/bench"])
    else:
        principal = engram.identity.authenticate(key)
    return cached, engram, key, engram.identity.enter(principal, context, ANY, "bench")


def fill(data: Path, c: Corpus, start: int, end: int, key: str | None, context: str = "bench") -> tuple[str, float]:
    """Memories start..end into `context` through `memory_store_batch`; (the key, memories/s)."""
    cached, engram, key, caller = filler(data, key, context)
    store, recall = find("memory_store_batch"), find("memory_recall")
    assert store and recall
    # the writer serves reads (as a server taking these writes would): the context is loaded, so writes follow in
    # memory, its graph is built and grows with them, and it is saved as a segment as it grows and when this ends
    reading = engram.family_services(recall.family)

    def read(query: str) -> None:
        recall.run(reading, caller, recall.input.model_validate({"query": query}), lambda *_: None)

    read("hello")
    t0 = time.perf_counter()
    for i in range(start, end, BATCH):
        batch = []
        for j in range(i, min(end, i + BATCH)):
            text, vector = c.item(j)
            cached.known[text] = vector
            batch.append({"content": text, "session_id": f"s{j // 20}"})
        store.run(
            engram.family_services(store.family), caller, store.input.model_validate({"turns": batch}), lambda *_: None
        )
        cached.known.clear()
        if (i - start) % 10_000 == 0:  # a read now and then, as a server's clients would send
            read(batch[0]["content"])
        if (i - start) % 20_000 == 0 and i > start:
            print(f"    {i} stored, {(i - start) / (time.perf_counter() - t0):.0f}/s", file=sys.stderr, flush=True)
    engram.queue.join()
    rate = (end - start) / (time.perf_counter() - t0)
    settle(engram)
    # its queue's worker ended now: left to a collection, the engine could outlive this call (a large context's load
    # freezes the collector's generations) and its worker take the next filler's jobs (found at 100k chunks: the
    # embedding jobs, with an empty cache)
    engram.queue.stop()
    del engram
    return key, rate


def settle(engram: Any) -> None:
    """Wait for the index's graphs to catch up and its saves to end, then close it as the process's exit does: each
    large context saved as a segment, with its graph."""
    index = engram.index._index  # the SqliteSearchIndex inside the guard
    t1 = time.perf_counter()
    while alive := [t for t in [*index.graphs, *index.saves] if t.is_alive()]:
        alive[0].join()
    index.close()
    print(f"    graph and segment settled in {time.perf_counter() - t1:.0f} s", file=sys.stderr, flush=True)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def recall_times(
    http: httpx.Client, url: str, questions: list[str], samples: int, tag: str, tool: str = "memory_recall"
) -> list[float]:
    """`samples` calls of `tool` (k 10: `memory_recall`, or `knowledge_search`) with fresh questions over MCP HTTP,
    one after another: each one's ms."""
    times = []
    for i in range(samples):
        t = time.perf_counter()
        res = mcp_call(http, url, tool, {"query": f"{questions[i % len(questions)]} #{tag}{i}", "k": 10})
        times.append((time.perf_counter() - t) * 1000)
        assert not res.get("isError"), res
    return times


def graph_saved(data: Path, context: str) -> float | None:
    """When the context's newest segment was published (its folder's time), if it holds a graph with its keys (one a
    server opens with the segment, not builds again); None otherwise."""
    d = segment_folder(data / "search.db.segments", context)
    found = sorted(p for p in d.iterdir() if not p.name.startswith(".")) if d.is_dir() else []
    if found and all((found[-1] / f).exists() for f in ("graph.faiss", "graph_keys.npy", "graph_twins.npy")):
        return found[-1].stat().st_mtime
    return None


def wait_for_graph(
    http: httpx.Client,
    url: str,
    questions: list[str],
    limit: float,
    saved: Callable[[], float | None] | None,
    since: float,
    tool: str = "memory_recall",
) -> dict[str, Any]:
    """Calls in windows of 20 until the server has the context's graph, or `limit` seconds pass (a build takes ~30 s a
    100k vectors on its one thread here): when that was, and the first window's p50. The graph is in when the newest
    segment holds one (`saved`: a server opens it with the segment, or saves one as it installs a graph it built, at
    `since` or after); a context too small for a segment has none on disk, and its graph is taken to be in when a
    window's p50 is under 60 % of the first's, or three in a row are within 20 % of each other (`saved` None). Timing
    alone had misread a graph being built again (an old segment's) as in from the start: every search was exact."""
    t0, first, n = time.perf_counter(), None, 0
    windows: list[float] = []
    while time.perf_counter() - t0 < limit:
        on_disk = saved() if saved is not None else None
        if on_disk is not None:
            return {
                "first_window_p50_ms": first,
                "graph_ready_s": 0.0 if on_disk < since else round(time.perf_counter() - t0, 1),
                "graph": "opened with its segment" if on_disk < since else "built and saved",
            }
        times = []
        for _ in range(20):
            n += 1
            t = time.perf_counter()
            mcp_call(http, url, tool, {"query": f"{questions[n % len(questions)]} #g{n}", "k": 10})
            times.append((time.perf_counter() - t) * 1000)
        p50 = pct(times, 50)
        first = first or p50
        windows.append(p50)
        steady = len(windows) >= 3 and max(windows[-3:]) <= 1.2 * min(windows[-3:])
        if saved is None and (p50 < 0.6 * first or steady):
            return {"first_window_p50_ms": first, "graph_ready_s": round(time.perf_counter() - t0, 1)}
        time.sleep(2)
    return {"first_window_p50_ms": first, "graph_ready_s": None}


def measure(
    data: Path,
    key: str,
    questions: list[str],
    samples: int,
    size: int,
    tool: str = "memory_recall",
    context: str = "bench",
) -> dict[str, Any]:
    """A fresh server over the data: its first call of `tool` (`memory_recall`: `first_recall_s`, `recall_p50_ms`...;
    `knowledge_search`: `first_search_s`, `search_p50_ms`...), then `samples` calls of fresh questions."""
    name = "recall" if tool == "memory_recall" else "search"
    since = time.time()
    t0 = time.perf_counter()
    proc, url = start(data, timeout=600)
    started = time.perf_counter() - t0
    out: dict[str, Any] = {"server_start_s": round(started, 2)}
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
        try:
            t = time.perf_counter()
            res = mcp_call(http, url, tool, {"query": questions[0], "k": 10})
            out[f"first_{name}_s"] = round(time.perf_counter() - t, 2)
            assert not res.get("isError"), res
            for i in range(10):
                mcp_call(http, url, tool, {"query": f"{questions[i + 1]} #w{i}", "k": 10})
            if size >= MIN_VECTORS:  # the graph is built in the background after the first query: until it is in
                # a segment with its graph: one of SEGMENT_MIN documents, or fewer long ones (`saving.large`)
                on_disk = size >= SEGMENT_MIN or graph_saved(data, context) is not None
                saved = partial(graph_saved, data, context) if on_disk else None
                out.update(wait_for_graph(http, url, questions, 60 + size * 0.0006, saved, since, tool))
            times = recall_times(http, url, questions, samples, "s", tool)
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = pct(times, 50), pct(times, 99)
            out["server_peak_rss_mb"] = round(peak_rss_mb(proc.pid))
        finally:
            stop(proc)
    out["disk_mb"] = round(sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 1e6, 1)
    return out


def run(largest: int | None = None, samples: int = SAMPLES) -> dict[str, Any]:
    c = corpus()
    _, questions = turns_and_questions()
    held: dict[str, Any] = {"key": None, "have": 0}

    def step(data: Path, size: int) -> tuple[str, dict[str, Any]]:
        key, rate = fill(data, c, held["have"], size, held["key"])
        held.update(key=key, have=size)
        return key, {"store_per_s": round(rate, 1), **measure(data, key, questions, samples, size)}

    return curve("engram-scale-", largest, {"texts": len(c.texts)}, step)


def curve(
    prefix: str, largest: int | None, results: dict[str, Any], step: Callable[[Path, int], tuple[str, dict[str, Any]]]
) -> dict[str, Any]:
    """Each of `SIZES` up to `largest` (or `SCALE_MAX`): `step(folder, size)` grows the context to it and measures it —
    (the key, the size's row). In a temporary folder, or in `SCALE_DATA`, kept (its key in `bench-key`) to measure
    again (`measure`)."""
    largest = largest or int(os.environ.get("SCALE_MAX", "100000"))
    kept = os.environ.get("SCALE_DATA")
    tmp = Path(kept) if kept else Path(tempfile.mkdtemp(prefix=prefix))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        key = ""
        for size in (s for s in SIZES if s <= largest):
            key, row = step(tmp, size)
            results[str(size)] = row
            print(f"  {size}: {json.dumps(row)}", file=sys.stderr, flush=True)
        if kept:
            (tmp / "bench-key").write_text(key)
    finally:
        if not kept:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else None), indent=2))


def bulk(n: int = 5_000) -> dict[str, Any]:
    """Bulk embedding: `n` LoCoMo turns embedded by the model alone in one call (its ceiling here: batches by
    length, two single-threaded sessions side by side on two cores), then stored through `memory_store_batch`
    (100 a call, in process) with the shipped extractor (the pass that embeds a turn also reads its names) and
    with the rules alone: texts/s each (`make bench BENCH=bulk`)."""
    turns, _ = turns_and_questions()
    texts = [f"{t} ({i // len(turns)})" if i >= len(turns) else t for i, t in enumerate(turns * 2)][:n]
    model = OnnxEmbedder()
    model.embed(texts[:64])
    t0 = time.perf_counter()
    model.embed(texts)
    out: dict[str, Any] = {"texts": n, "model_alone_per_s": round(n / (time.perf_counter() - t0), 1)}
    for extractor in ("learned", "rules"):
        with tempfile.TemporaryDirectory() as tmp:
            engram = build_local(Settings(data_dir=Path(tmp), extractor=extractor), embedder=OnnxEmbedder())
            _, principal = engram.identity.create_key(["bulk"], "agent", ["org/bench"])
            caller = engram.identity.enter(principal, "bulk", ANY, "bench")
            store = find("memory_store_batch")
            assert store
            t0 = time.perf_counter()
            for i in range(0, n, BATCH):
                batch = [{"content": t, "session_id": f"s{(i + j) // 20}"} for j, t in enumerate(texts[i : i + BATCH])]
                store.run(
                    engram.family_services(store.family),
                    caller,
                    store.input.model_validate({"turns": batch}),
                    lambda *_: None,
                )
            engram.queue.join()
            out[f"memory_store_batch_{extractor}_per_s"] = round(n / (time.perf_counter() - t0), 1)
            del engram
    print(f"  bulk: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def ann_recall(n: int = 100_000, queries: int = 300) -> dict[str, Any]:
    """The local index's graph against exact search (`BENCH=ann`): `n` of the corpus's vectors in one context of the
    SQLite index, the graph built (its time), then LoCoMo questions embedded for real, k 10, through the index's own
    vector search: recall@10 of the graph path against the exact product, and each path's time in process."""
    from datetime import UTC, datetime

    from engram.adapters.local.sqlite_search import SqliteSearchIndex
    from engram.kernel.ports import IndexDoc, SearchQuery

    c = corpus()
    _, questions = turns_and_questions()
    model = OnnxEmbedder()
    qvs = model.embed(questions[:queries])
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        index = SqliteSearchIndex(Path(tmp) / "search.db")
        for start in range(0, n, 5000):
            index.upsert([IndexDoc("bench", "turn", f"t{i}", c.item(i)[0], c.item(i)[1], ["org/bench"], None, None,
                                   {}) for i in range(start, min(n, start + 5000))])  # fmt: skip
        query = SearchQuery("bench", "", qvs[0], mode="vector", k=10, visibility=[["org"]])
        index.search(query, now)
        t0 = time.perf_counter()
        for t in index.graphs:
            t.join()
        built = time.perf_counter() - t0
        cache = index._contexts["bench"]
        out: dict[str, Any] = {"vectors": n, "graph_build_s": round(built, 1)}
        for k in (10, 150):  # a client's k, and the list a hybrid search fuses (its pool)
            graph_ms, exact_ms, overlap = [], [], []
            for qv in qvs:
                q = SearchQuery("bench", "", qv, mode="vector", k=k, visibility=[["org"]])
                t = time.perf_counter()
                got = [h.id for h in index.search(q, now)]
                graph_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                scores = cache.cosine(np.asarray(qv, dtype=np.float32))
                top = np.argsort(-scores, kind="stable")[:k]
                exact_ms.append((time.perf_counter() - t) * 1000)
                want = {r.id for i in top if (r := cache.rows[int(i)]) is not None}
                overlap.append(len(want & set(got)) / k)
            out[f"recall_at_{k}"] = round(float(np.mean(overlap)), 4)
            out[f"graph_search_k{k}_p50_ms"] = pct(graph_ms, 50)
            out[f"exact_product_k{k}_p50_ms"] = pct(exact_ms, 50)
        index.close()  # the segment its graph is saved in, written before the folder goes
    print(f"  ann: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out
