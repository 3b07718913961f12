"""Cranfield (BEIR layout) through knowledge_bulk_ingest and knowledge_search: nDCG@10, Recall@10/100,
MRR@10 per mode (definitions of ../shared/data/README.md), ingest throughput, HTTP search latency."""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

from bench.fusion import rrf60
from bench.latency import MCP_HEADERS, json_of, pct
from engram.cli.devserver import serve
from engram.families import find
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import build_local

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
CISI = DATA.with_name("cisi")  # long natural-language questions: the check for settings chosen on cranfield
MODES = ("bm25", "vector", "hybrid")


def load(data: Path = DATA) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, dict[str, int]]]:
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").read_text().splitlines() if line.strip()]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (data / "queries.jsonl").read_text().splitlines())}
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels[qid][did] = int(score)
    return corpus, queries, qrels


def metrics(ranked: list[str], rels: dict[str, int]) -> dict[str, float]:
    dcg = sum((2 ** rels.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(rels.values(), reverse=True)[:10]
    idcg = sum((2**r - 1) / math.log2(i + 2) for i, r in enumerate(ideal))
    relevant = {d for d, r in rels.items() if r > 0}
    rr = next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in relevant), 0.0)
    return {
        "nDCG@10": dcg / idcg if idcg else 0.0,
        "Recall@10": len(relevant & set(ranked[:10])) / len(relevant) if relevant else 0.0,
        "Recall@100": len(relevant & set(ranked[:100])) / len(relevant) if relevant else 0.0,
        "MRR@10": rr,
    }


def run(samples: int = 200) -> dict[str, Any]:
    corpus, queries, qrels = load()
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp)))
        key, principal = engram.identity.create_key(["cranfield"], "agent", ["bench"])
        caller = engram.identity.enter(principal, "cranfield", ANY, "bench")
        result = _ingest(engram, caller, corpus)
        result["modes"] = _quality(engram, caller, queries, qrels)
        del engram
        result["http"] = _latency(tmp, key, [queries[q] for q in queries if q in qrels], samples)
    return result


def run_cisi() -> dict[str, Any]:
    """CISI through the same ingest and knowledge_search as cranfield: quality only (`BENCH=cisi`)."""
    corpus, queries, qrels = load(CISI)
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp)))
        _, principal = engram.identity.create_key(["cisi"], "agent", ["bench"])
        caller = engram.identity.enter(principal, "cisi", ANY, "bench")
        result = _ingest(engram, caller, corpus)
        result["modes"] = _quality(engram, caller, queries, qrels)
    return result


def run_opensearch(samples: int = 200) -> dict[str, Any]:
    """The same ingest and queries with the AWS search adapter (OpenSearchIndex) on the OpenSearch node the
    tests start; records, blobs and the model stay embedded. Latency is in process (no HTTP, no Lambda)."""
    from engram.adapters.aws.opensearch_index import OpenSearchIndex
    from engram.wiring import Engram, opensearch_client
    from tests.opensearch import opensearch_node

    corpus, queries, qrels = load()
    with opensearch_node() as url, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), opensearch_url=url, opensearch_service="none")
        # only the parts: a second Engram with a queue worker would take half the embedding jobs from the
        # shared records and index their vectors into its own embedded index, not OpenSearch
        local = build_local(settings.model_copy(update={"queue_worker": False}))
        index = OpenSearchIndex(opensearch_client(settings), "bench-cranfield", dim=384, refresh=False)
        engram = Engram(settings, local.records, local.blobs, index, local.embedder, local.clock)
        _, principal = engram.identity.create_key(["cranfield"], "agent", ["bench"])
        caller = engram.identity.enter(principal, "cranfield", ANY, "bench")
        result = _ingest(engram, caller, corpus)
        opensearch_client(settings).indices.refresh(index="bench-cranfield")
        result["modes"] = _quality(engram, caller, queries, qrels)
        search = find("knowledge_search")
        assert search
        judged = [q for q in queries if q in qrels]
        result["in_process"] = {}
        for mode in MODES:
            times = []
            for i in range(samples):
                args = search.input.model_validate({"query": queries[judged[i % len(judged)]], "mode": mode, "k": 10})
                t = time.perf_counter()
                search.run(engram.family_services(search.family), caller, args, lambda *_: None)
                times.append((time.perf_counter() - t) * 1000)
            result["in_process"][mode] = {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}
    return result


def _ingest(engram: Any, caller: Any, corpus: list[dict[str, Any]]) -> dict[str, Any]:
    bulk = find("knowledge_bulk_ingest")
    assert bulk
    t0, chunks = time.perf_counter(), 0
    errors: list[dict[str, Any]] = []
    for i in range(0, len(corpus), 100):
        docs = [{"title": d["title"], "content": d["text"], "metadata": {"beir_id": d["_id"]}}
                for d in corpus[i : i + 100]]  # fmt: skip
        # a client's defaults (issue #25: the 512-token chunks this bench used were not what a client gets)
        args = bulk.input.model_validate({"collection": "cranfield", "documents": docs})
        out = bulk.run(engram.family_services(bulk.family), caller, args, lambda *_: None)
        assert isinstance(out, dict)
        errors += [dict(e, beir_id=docs[e["index"]]["metadata"]["beir_id"]) for e in out["errors"]]
        chunks += out["total_chunks"]
        print(f"  ingested {min(i + 100, len(corpus))}/{len(corpus)}", file=sys.stderr, flush=True)
    engram.queue.join()
    ingest_s = time.perf_counter() - t0
    return {
        "documents": len(corpus), "chunks": chunks, "ingest_errors": errors, "ingest_seconds": round(ingest_s, 1),
        "docs_per_s": round(len(corpus) / ingest_s, 1), "chunks_per_s": round(chunks / ingest_s, 1),
    }  # fmt: skip


def _quality(engram: Any, caller: Any, queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Every mode's metrics, and `rrf60`: a plain RRF (k = 60) of the bm25 and vector modes' own top 100."""
    search = find("knowledge_search")
    assert search
    modes: dict[str, Any] = {}
    judged = [q for q in queries if q in qrels]
    ranked: dict[tuple[str, str], list[str]] = {}
    for mode in (*MODES, "rrf60"):
        sums: dict[str, float] = defaultdict(float)
        for qid in judged:
            if mode == "rrf60":
                ranked[mode, qid] = rrf60(ranked["bm25", qid], ranked["vector", qid])
            else:
                args = search.input.model_validate({"query": queries[qid], "mode": mode, "k": 100})
                out = search.run(engram.family_services(search.family), caller, args, lambda *_: None)
                assert isinstance(out, dict)
                # chunks -> documents: a document ranks where its best chunk does
                ranked[mode, qid] = list(dict.fromkeys(str(r["metadata"]["beir_id"]) for r in out["results"]))
            for name, value in metrics(ranked[mode, qid], qrels[qid]).items():
                sums[name] += value
        modes[mode] = {k: round(v / len(judged), 3) for k, v in sums.items()}
        print(f"  {mode}: {modes[mode]}", file=sys.stderr, flush=True)
    return modes


def _latency(data_dir: str, key: str, questions: list[str], samples: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with serve(data_dir) as url, httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        for mode in MODES:
            times = []
            for i in range(samples):
                args = {"query": questions[i % len(questions)], "mode": mode, "k": 10}
                body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "knowledge_search", "arguments": args}}  # fmt: skip
                t = time.perf_counter()
                r = http.post(url + "/mcp", json=body, headers=MCP_HEADERS)
                times.append((time.perf_counter() - t) * 1000)
                assert "result" in json_of(r.text)
            out[mode] = {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99)}
    return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
