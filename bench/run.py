"""`make bench`: every benchmark (or those named: locomo, latency, cranfield, cisi, scores, conversations,
records, workspace, cranfield-opensearch, coldstart, lambda, hostile, conll04, protocol, reads, erasure, access,
trust, extraction, console, locomo-time, portability, backup, scale, scale-chunks, bulk, ann, clients,
needle, opensearch-scale), as JSON on
stdout and in bench/out/latest.json; bench/RESULTS.md keeps the figures with how and where they were measured.

Beside each benchmark, the machine's pace before and after it (`pace_ms`): one forward pass of the shipped model
over 4 x 256 tokens on one thread, the fastest of 7. The same code on this machine ran at half its speed on some
days (bench/RESULTS.md, #25, nineteenth session), so a time figure compares with another only at the same pace."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

PACE_RUNS = 7


def pace_ms() -> float:
    """The fastest of `PACE_RUNS` forward passes of the shipped MiniLM graph over a fixed 4 x 256-token batch on one
    thread: the same arithmetic every time, so it moves only with the machine."""
    import time

    import numpy as np
    import onnxruntime as ort

    from engram.adapters.local.onnx_embedder import default_model_path
    from engram.adapters.local.onnx_graph import simplify

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    model, _ = simplify(default_model_path().read_bytes())
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(1).integers(1000, 20000, size=(4, 256)).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    session.run(None, feed)
    best = float("inf")
    for _ in range(PACE_RUNS):
        started = time.perf_counter()
        session.run(None, feed)
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def main(names: list[str]) -> None:
    from bench import (
        access,
        backup,
        clients,
        coldstart,
        conll04,
        console,
        conversations,
        cranfield,
        erasure,
        extraction,
        hostile,
        lambda_latency,
        latency,
        locomo,
        locomo_time,
        needle,
        opensearch_scale,
        portability,
        protocol,
        reads,
        records,
        scale,
        scale_chunks,
        scores,
        trust,
        workspace,
    )

    benches = {
        "locomo": locomo.run,
        "latency": latency.run,
        "cranfield": cranfield.run,
        "cisi": cranfield.run_cisi,
        "scores": scores.run,
        "conversations": conversations.run,
        "records": records.run,
        "workspace": workspace.run,
        "cranfield-opensearch": cranfield.run_opensearch,
        "coldstart": coldstart.run,
        "lambda": lambda_latency.run,
        "hostile": hostile.run,
        "conll04": conll04.run,
        "protocol": protocol.run,
        "reads": reads.run,
        "erasure": erasure.run,
        "access": access.run,
        "trust": trust.run,
        "extraction": extraction.run,
        "console": console.run,
        "locomo-time": locomo_time.run,
        "portability": portability.run,
        "backup": backup.run,
        "scale": scale.run,
        "scale-chunks": scale_chunks.run,
        "bulk": scale.bulk,
        "ann": scale.ann_recall,
        "clients": clients.run,
        "needle": needle.run,
        "opensearch-scale": opensearch_scale.run,
    }
    chosen = names or list(benches)
    out: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    }
    for i, name in enumerate(chosen, 1):
        before = pace_ms()
        print(f"[{i}/{len(chosen)}] {name} ... (pace {before} ms)", file=sys.stderr, flush=True)
        result = benches[name]()
        out[name] = {**result, "pace_ms": {"before": before, "after": pace_ms()}}
        print(json.dumps({name: out[name]}, indent=2), flush=True)
    target = Path(__file__).with_name("out")
    target.mkdir(exist_ok=True)
    (target / "latest.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
