"""Agrama's code workspace (`BENCH=workspace`, issue #15): a real source tree from this environment (moto and
numpy: ~1,900 Python files) imported as `engram workspace import` does (files/s); then code search judged
from the code itself: for each documented function or class, the first sentence of its docstring is the
query and its file the answer (a sample of 400), with one file that imports the answer as the graph's
context where there is one. MRR@10 and recall@10 of lexical, semantic, graph and hybrid (Agrama's default
weights 0.4 / 0.4 / 0.2), through the same code `hybrid_search` runs. In process."""

from __future__ import annotations

import ast
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.wiring import build_local

PACKAGES = ("moto", "numpy")
QUERIES = 400


def tree() -> list[tuple[str, str]]:
    import numpy

    site = Path(numpy.__file__).resolve().parents[1]
    out = []
    for pkg in PACKAGES:
        for f in sorted((site / pkg).rglob("*.py")):
            try:
                out.append((f.relative_to(site).as_posix(), f.read_text()))
            except UnicodeDecodeError:
                continue
    return out


def labelled(files: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(query, answer path): the first sentence of each documented function's or class's docstring."""
    pairs: dict[str, str] = {}
    seen_twice: set[str] = set()
    for path, text in files:
        try:
            module = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                doc = ast.get_docstring(node) or ""
                first = re.split(r"(?<=[.!?])\s|\n\s*\n", doc.strip(), maxsplit=1)[0].strip()
                if len(first.split()) < 4 or len(first) > 300:
                    continue
                if first in pairs and pairs[first] != path:
                    seen_twice.add(first)  # the same sentence in two files: no single answer
                pairs.setdefault(first, path)
    usable = sorted((q, p) for q, p in pairs.items() if q not in seen_twice)
    return random.Random(5).sample(usable, min(QUERIES, len(usable)))


MODES = {
    "lexical": {"lexical_weight": 1.0, "semantic_weight": 0.0, "graph_weight": 0.0},
    "semantic": {"lexical_weight": 0.0, "semantic_weight": 1.0, "graph_weight": 0.0},
    "graph": {"lexical_weight": 0.0, "semantic_weight": 0.0, "graph_weight": 1.0},
    "hybrid": {"lexical_weight": 0.4, "semantic_weight": 0.4, "graph_weight": 0.2},
}


def run() -> dict[str, Any]:
    files = tree()
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), queue_worker=False))
        _, principal = engram.identity.create_key(["bench"], "agent", ["org/bench"])
        caller = engram.identity.enter(principal, "bench", ANY, "bench")
        t0 = time.perf_counter()

        def progress(done: int, total: int) -> None:
            if done % 640 == 0 or done == total:
                print(f"  imported {done}/{total}", file=sys.stderr, flush=True)

        out = engram.workspace.import_files(caller, files, "bench import", "bench", progress)
        seconds = time.perf_counter() - t0
        engram.queue.join()  # the vectors, which the import leaves to queued jobs
        embedded = time.perf_counter() - t0
        result: dict[str, Any] = {
            "files": len(files),
            "lines": sum(t.count("\n") for _, t in files),
            "imported": out["imported"],
            "import_files_per_s_keyword_searchable": round(out["imported"] / seconds, 1),
            "import_seconds": round(seconds, 1),
            "import_files_per_s_embedded": round(out["imported"] / embedded, 1),
            "embedded_seconds": round(embedded, 1),
        }
        pairs = labelled(files)
        contexts = {p: (engram.workspace.dependents_of(caller, p) or [None])[0] for _, p in pairs}
        result["queries"] = len(pairs)
        result["queries_with_graph_context"] = sum(1 for _, p in pairs if contexts[p])
        for mode, weights in MODES.items():
            rr, hit, ms = 0.0, 0, []
            for query, answer in pairs:
                context = [contexts[answer]] if contexts[answer] else []
                semantic = weights["semantic_weight"] > 0
                args = SimpleNamespace(query=query, context_files=context, max_results=10, include_semantic=semantic,
                                       include_graph=True, **weights)  # fmt: skip
                started = time.perf_counter()
                ranked = [r["path"] for r in engram.codeviews.hybrid(caller, args)["results"]]
                ms.append((time.perf_counter() - started) * 1000)
                if answer in ranked:
                    rr += 1 / (ranked.index(answer) + 1)
                    hit += 1
            result[mode] = {"MRR@10": round(rr / len(pairs), 3), "recall@10": round(hit / len(pairs), 3),
                            "p50_ms": round(sorted(ms)[len(ms) // 2], 1)}  # fmt: skip
            print(f"  {mode}: {result[mode]}", file=sys.stderr, flush=True)
        return result
