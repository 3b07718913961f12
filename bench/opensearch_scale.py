"""#54, the AWS side: the OpenSearch adapter (`OpenSearchIndex`, the shipped mapping: lucene HNSW, cosine, BM25 on
Snowball stems) holding N memory documents in one context on the node the tests start (`make bench
BENCH=opensearch-scale`; N from `OPENSEARCH_SCALE`, default 1,000,000). The documents are `bench.scale`'s
(real texts and the shipped model's cached vectors, pairs past the ~23k sentences), written through the adapter's
`upsert` in batches of 500; then hybrid searches (the product's `search_rules` over the adapter's two lists) of
fresh LoCoMo questions embedded for real: p50 / p99 in process, index size on disk and segments (not
force-merged), indexing rate.

`python -m bench.opensearch_scale [n]`."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.latency import pct
from bench.locomo import turns_and_questions
from bench.scale import corpus
from engram.adapters.aws.opensearch_index import OpenSearchIndex
from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder
from engram.kernel.ports import IndexDoc, SearchQuery
from engram.settings import Settings
from engram.wiring import opensearch_client
from tests.opensearch import opensearch_node

INDEX = "bench-scale"
SAMPLES = 200


def run(n: int | None = None) -> dict[str, Any]:
    n = n or int(os.environ.get("OPENSEARCH_SCALE", "1000000"))
    c = corpus()
    _, questions = turns_and_questions()
    embedder = OnnxMiniLMEmbedder()
    out: dict[str, Any] = {"documents": n}
    with opensearch_node(timeout=300) as url:
        client = opensearch_client(Settings(opensearch_url=url, opensearch_service="none"))
        index = OpenSearchIndex(client, INDEX, dim=384, refresh=False)
        index.ensure()
        scopes = ["org/bench"]
        now = datetime.now(UTC)
        qvs = embedder.embed(questions[: SAMPLES + 10])

        def hybrid(samples: int) -> dict[str, Any]:
            """Hybrid searches of fresh questions as the index is now (refreshed): p50 / p99 in process."""
            client.indices.refresh(index=INDEX)
            times: list[float] = []
            for i in range(samples + 10):
                q = SearchQuery("bench", questions[i], qvs[i], mode="hybrid", k=10, visibility=[["org/bench"]])
                t = time.perf_counter()
                hits = index.search(q, now)
                if i >= 10:
                    times.append((time.perf_counter() - t) * 1000)
                assert hits
            stats = client.indices.stats(index=INDEX)["_all"]["primaries"]
            size = round(stats["store"]["size_in_bytes"] / 1e6, 1)
            return {"hybrid_p50_ms": pct(times, 50), "hybrid_p99_ms": pct(times, 99), "index_mb": size,
                    "segments": stats["segments"]["count"]}  # fmt: skip

        t0 = time.perf_counter()
        for start in range(0, n, 500):
            docs = []
            for i in range(start, min(n, start + 500)):
                text, vector = c.item(i)
                docs.append(IndexDoc("bench", "turn", f"t{i:07d}", text, vector, scopes, None, None, {"n": i}))
            index.upsert(docs)
            done = start + len(docs)
            if done % 250_000 == 0 and done < n:  # a checkpoint: the figures at this size, should the run be cut
                rate = round(done / (time.perf_counter() - t0), 1)
                print(json.dumps({"indexed": done, "index_per_s": rate, **hybrid(50)}), file=sys.stderr, flush=True)
        client.indices.refresh(index=INDEX)
        out["index_per_s"] = round(n / (time.perf_counter() - t0), 1)
        out.update(hybrid(SAMPLES))  # not force-merged: as a live index is searched
        out["engine"] = "lucene HNSW (m 16, ef_construction 100: the OpenSearch defaults), cosinesimil, float32"
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else None), indent=2))
