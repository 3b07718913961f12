"""memory_store / memory_recall through the Lambda handlers, in process: API Gateway v2 events through
the template's authorizer and the /mcp gateway into the memory function, over moto (DynamoDB, S3, SQS)
and a real OpenSearch node, with N memories loaded. Compare with `latency` (the embedded server)."""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from typing import Any

from bench.latency import pct
from bench.locomo import turns_and_questions
from tests.aws import aws_endpoint
from tests.aws_lambda.conftest import deployed_stack
from tests.opensearch import opensearch_node

HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}


def run(memories: int = 500, samples: int = 100) -> dict[str, Any]:
    turns, questions = turns_and_questions()
    rng = random.Random(7)
    with aws_endpoint() as endpoint, opensearch_node() as opensearch, deployed_stack(endpoint, opensearch) as stack:
        key = stack.keys.agent
        t0 = time.perf_counter()
        for start in range(0, memories, 50):
            batch = [
                {"content": turns[(start + i) % len(turns)], "session_id": f"s{(start + i) // 20}"} for i in range(50)
            ]
            answer = stack.api.request("POST", "/api/v1/acme/facts/batch", {"turns": batch}, key)
            assert answer.status == 200, answer.body
            if (start + 50) % 250 == 0:
                print(f"  loaded {start + 50}/{memories}", file=sys.stderr, flush=True)
        load_s = time.perf_counter() - t0

        def timed(path: str, tool: str, args: dict[str, Any]) -> float:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
            t = time.perf_counter()
            answer = stack.api.request("POST", path, body, key, HEADERS)
            elapsed = (time.perf_counter() - t) * 1000
            assert answer.status == 200 and "result" in answer.json(), answer.body
            return elapsed

        out: dict[str, Any] = {"memories": memories, "load_seconds": round(load_s, 1)}
        for path in ("/mcp", "/mcp/memory"):
            store = [
                timed(path, "memory_store", {"content": rng.choice(turns), "session_id": "b"}) for _ in range(samples)
            ]
            recall = [
                timed(path, "memory_recall", {"query": questions[i % len(questions)] + f" #{i}{path}", "k": 10})
                for i in range(samples)
            ]
            out[path] = {
                "store_ms": {"p50": pct(store, 50), "p99": pct(store, 99), "mean": round(statistics.mean(store), 1)},
                "recall_ms": {
                    "p50": pct(recall, 50),
                    "p99": pct(recall, 99),
                    "mean": round(statistics.mean(recall), 1),
                },
            }
        return out


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
