"""p50/p99 of memory_store and memory_recall over HTTP against `engram serve` holding N memories,
and the size of tools/list."""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from typing import Any

import httpx

from bench.locomo import turns_and_questions
from engram.cli.devserver import cli, serve

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))], 2)


def mcp_call(
    http: httpx.Client, url: str, tool: str, args: dict[str, Any], headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """A tools/call over MCP's HTTP transport (`headers` added to the MCP ones: a context, another key)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    r = http.post(url + "/mcp", json=body, headers=MCP_HEADERS | (headers or {}))
    r.raise_for_status()
    result: dict[str, Any] = json_of(r.text)["result"]
    return result


def json_of(text: str) -> dict[str, Any]:
    """The JSON-RPC message of a response, with or without SSE framing."""
    if not text.lstrip().startswith("{"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    out: dict[str, Any] = json.loads(text)
    return out


def run(memories: int = 10_000, samples: int = 300) -> dict[str, Any]:
    turns, questions = turns_and_questions()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        out = cli("keys", "create", "--context", "bench", "--principal", "agent", "--grant", "org/bench", data_dir=tmp)
        key = out.strip().splitlines()[-1]
        with serve(tmp) as url, httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            t0 = time.perf_counter()
            loaded = 0
            while loaded < memories:
                batch = [
                    {"content": turns[(loaded + i) % len(turns)], "session_id": f"s{(loaded + i) // 20}"}
                    for i in range(min(100, memories - loaded))
                ]
                http.post(url + "/api/v1/bench/facts/batch", json={"turns": batch}).raise_for_status()
                loaded += len(batch)
                if loaded % 2000 == 0:
                    print(f"  loaded {loaded}/{memories}", file=sys.stderr, flush=True)
            load_s = time.perf_counter() - t0
            store_ms, recall_ms, server_ms = [], [], []
            for _ in range(samples):
                t = time.perf_counter()
                mcp_call(http, url, "memory_store", {"content": rng.choice(turns), "session_id": "bench"})
                store_ms.append((time.perf_counter() - t) * 1000)
            for i in range(samples):
                q = questions[i % len(questions)] + f" #{i}"  # distinct: no cache tier
                t = time.perf_counter()
                res = mcp_call(http, url, "memory_recall", {"query": q, "k": 10})
                recall_ms.append((time.perf_counter() - t) * 1000)
                server_ms.append(res["structuredContent"]["queryMs"])
            # Cortex's working context, over MCP: a key per sample among 1,000, values of ~200 bytes
            ctx_set_ms, ctx_get_ms = [], []
            for i in range(1000):
                mcp_call(http, url, "context_set", {"key": f"agent/state/{i}", "value": {"step": i, "note": "x" * 180}})
            for i in range(samples):
                t = time.perf_counter()
                mcp_call(http, url, "context_set", {"key": f"agent/state/{i % 1000}", "value": {"step": i}})
                ctx_set_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                mcp_call(http, url, "context_get", {"key": f"agent/state/{(i * 7) % 1000}"})
                ctx_get_ms.append((time.perf_counter() - t) * 1000)
            conversation = _conversations(http, url, turns, questions, samples)
            entity_ms = _entities(http, url, samples)
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            listed = http.post(url + "/mcp", json=body, headers=MCP_HEADERS).text
            per_family = {}
            for family in ("memory", "knowledge", "identity"):
                text = http.post(url + f"/mcp/{family}", json=body, headers=MCP_HEADERS).text
                per_family[family] = json_of(text)["result"]["tools"]
            # a key with two contexts sees `context_id` on every tool (a one-context key's catalogue omits it)
            two = cli("keys", "create", "--context", "bench", "--context", "other", "--principal", "agent",
                      "--grant", "org/bench", data_dir=tmp).strip().splitlines()[-1]  # fmt: skip
            auth = {"Authorization": f"Bearer {two}"}
            multi = json_of(http.post(url + "/mcp", json=body, headers={**MCP_HEADERS, **auth}).text)["result"]["tools"]
    from tokenizers import Tokenizer

    from engram.adapters.local.onnx_embedder import TOKENIZER_PATH

    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.no_truncation()  # the file caps at the model's 128; count everything
    tokenizer.no_padding()

    def size(tools: list[dict[str, Any]]) -> dict[str, int]:
        compact = json.dumps(tools, separators=(",", ":"))
        wordpiece = len(tokenizer.encode(compact, add_special_tokens=False).ids)
        return {"tools": len(tools), "bytes": len(compact), "chars_div_4": len(compact) // 4,
                "wordpiece_tokens": wordpiece, "wordpiece_per_tool": round(wordpiece / max(len(tools), 1))}  # fmt: skip

    tools = json_of(listed)["result"]["tools"]
    return {
        "memories": memories + samples,
        "load_seconds": round(load_s, 1),
        "store_ms": {"p50": pct(store_ms, 50), "p99": pct(store_ms, 99), "mean": round(statistics.mean(store_ms), 2)},
        "recall_ms": {
            "p50": pct(recall_ms, 50),
            "p99": pct(recall_ms, 99),
            "mean": round(statistics.mean(recall_ms), 2),
        },
        "recall_server_ms": {"p50": pct(server_ms, 50), "p99": pct(server_ms, 99)},
        "context_set_ms": {"p50": pct(ctx_set_ms, 50), "p99": pct(ctx_set_ms, 99)},
        "context_get_ms": {"p50": pct(ctx_get_ms, 50), "p99": pct(ctx_get_ms, 99)},
        **conversation,
        "entity_query_ms_at_10k_entities": {"p50": pct(entity_ms, 50), "p99": pct(entity_ms, 99)},
        "tools_list": {
            "all": size(tools),
            **{f: size(t) for f, t in per_family.items()},
            "all, a key with two contexts": size(multi),
        },
    }


def _conversations(
    http: httpx.Client, url: str, turns: list[str], questions: list[str], samples: int, messages: int = 10_000
) -> dict[str, Any]:
    """Cortex's conversations over MCP: 10,000 messages in 100 threads (the timed appends among them), then
    `conversation_search` in a thread and across all."""
    append_ms, search_ms = [], []
    for i in range(messages):
        args = {"thread_id": f"t{i % 100}", "role": ("user", "assistant")[i % 2], "content": turns[i % len(turns)]}
        t = time.perf_counter()
        mcp_call(http, url, "conversation_append", args)
        append_ms.append((time.perf_counter() - t) * 1000)
        if i % 2000 == 1999:
            print(f"  appended {i + 1}/{messages} messages", file=sys.stderr, flush=True)
    for i in range(samples):
        search: dict[str, Any] = {"query": questions[i % len(questions)] + f" #{i}", "limit": 10}
        if i % 2:
            search["thread_id"] = f"t{i % 100}"
        t = time.perf_counter()
        mcp_call(http, url, "conversation_search", search)
        search_ms.append((time.perf_counter() - t) * 1000)
    return {
        "conversation_append_ms": {"p50": pct(append_ms, 50), "p99": pct(append_ms, 99)},
        "conversation_search_ms_at_10k_messages": {"p50": pct(search_ms, 50), "p99": pct(search_ms, 99)},
    }


def _entities(http: httpx.Client, url: str, samples: int, entities: int = 10_000) -> list[float]:
    """10,000 people, each named in a stored turn (memory extracts them), then `entity_query` by name."""
    for start in range(0, entities, 100):
        batch = [{"content": f"My colleague is Person{n:05d} Example."} for n in range(start, start + 100)]
        http.post(url + "/api/v1/bench/facts/batch", json={"turns": batch}).raise_for_status()
    times = []
    for i in range(samples):
        t = time.perf_counter()
        mcp_call(http, url, "entity_query", {"name": f"person{(i * 37) % entities:05d} example"})
        times.append((time.perf_counter() - t) * 1000)
    return times


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
