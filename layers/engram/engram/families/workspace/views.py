"""What Agrama's read tools answer, in its fields: `read_code`, `hybrid_search` (its dialect),
`semantic_search`, `analyze_dependencies`, `get_context`, `query_history`, `get_performance_metrics` —
composed from the workspace (`engram.families.workspace.files`), the collaboration log (`collab`) and Engram's
own measurements (`engram.kernel.observability.calls`)."""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engram.families.workspace.collab import DECISION, CollabService
from engram.families.workspace.files import WorkspaceService
from engram.families.workspace.shapes import CHUNK, FILE, clean_path, parse_window
from engram.kernel.clock import Clock, iso, parse_time
from engram.kernel.errors import InvalidInput, NotFound
from engram.kernel.observability import Call, calls
from engram.kernel.ports import Item, SearchQuery, scan
from engram.kernel.scopes import can_see
from engram.search.terms import matching_terms

BACKUP = re.compile(r"^(?P<path>.+)\.backup\.(?P<ts>\d{9,12})$")
EMBEDDING_DIM = 384  # all-MiniLM-L6-v2; Bedrock's model when configured says its own


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))], 3) if s else 0.0


class CodeViews:
    def __init__(self, workspace: WorkspaceService, collab: CollabService, clock: Clock) -> None:
        self.ws, self.collab, self.clock = workspace, collab, clock

    # -- read_code --------------------------------------------------------------------------

    def _version_at(self, caller: Any, path: str, ts: int) -> Item | None:
        item = self.ws._file(caller, path)
        if item is None:
            return None
        for version in self.ws.records.history(caller.context_id, FILE, item.id):
            if version.data["provenance"]["timestamp"] == ts:
                return version
        return None

    def read(self, caller: Any, a: Any) -> dict[str, Any]:
        path = clean_path(a.path)
        item = self.ws._file(caller, path)
        backup = BACKUP.match(path) if item is None else None
        if backup is not None:  # a write's `backup_path`: the version before it
            item = self._version_at(caller, backup["path"], int(backup["ts"]))
        if item is None:
            return {"path": path, "exists": False, "content": None}
        content = self.ws.content(item)
        out: dict[str, Any] = {
            "path": path,
            "content": content,
            "exists": True,
            "version": item.version,
            "language": item.data["language"],
            "lines": item.data["lines"],
            "provenance": item.data["provenance"],
        }
        # a backup's questions are about the file as it is now; the file read above already is
        live = item if backup is None else (self.ws._file(caller, item.data["path"]) or item)
        if a.include_semantic_context:
            out["semantic_context"] = self._similar(caller, live, a.semantic_similarity_threshold)
        if a.include_dependencies:
            out["dependency_context"] = self._dependency_context(caller, live, a.dependency_depth)
        if a.include_history:
            versions = self.ws.records.history_page(caller.context_id, FILE, live.id, None, a.history_limit)
            out["history"] = [
                {
                    "timestamp": v.data["provenance"]["timestamp"],
                    "version": v.version,
                    "content": self.ws.content(v),
                    "agent_id": v.data["provenance"]["agent_id"],
                    "reason": v.data["provenance"]["reason"],
                }
                for v in versions
            ]
        if a.include_collaborative_context:
            out["collaborative_context"] = {"active_sessions": self.collab.sessions(caller, item.data["path"])}
        return out

    def _similar(self, caller: Any, item: Item, threshold: float) -> dict[str, Any]:
        vectors = self.ws.index.vectors(caller.context_id, [f"{item.id}#0"])
        vector = vectors.get(f"{item.id}#0")
        if vector is None:
            return {"embedding_available": False, "similarity_threshold": threshold, "similar_files": []}
        lens = self.ws.identity.read_lens(caller, None)
        q = SearchQuery(caller.context_id, "", vector, "vector", 30, (CHUNK,), lens)
        best: dict[str, float] = {}
        for h in self.ws.index.search(q, self.clock.now()):
            p = str(h.metadata["path"])
            if p != item.data["path"] and (h.semantic or 0.0) >= threshold:
                best[p] = max(best.get(p, 0.0), round(h.semantic or 0.0, 4))
        similar = [{"path": p, "similarity": s} for p, s in sorted(best.items(), key=lambda kv: -kv[1])[:10]]
        return {"embedding_available": True, "similarity_threshold": threshold, "similar_files": similar}

    def _dependency_context(self, caller: Any, item: Item, depth: int) -> dict[str, Any]:
        path = item.data["path"]
        forward = self.ws.walk(caller, path, depth, "forward")
        deps = sorted((p for p, d in forward.items() if d > 0), key=lambda p: (forward[p], p))
        dependents = self.ws.dependents_of(caller, path)
        files = max(1, self.ws.file_count(caller) - 1)
        direct = item.data.get("deps", [])
        return {
            "total_dependencies": len(deps) + len(item.data.get("externals", [])),
            "max_depth_analyzed": depth,
            "dependencies": deps + list(item.data.get("externals", [])),
            "dependents": dependents,
            "graph_centrality": round(min(1.0, (len(direct) + len(dependents)) / files), 4),
            "immediate_dependencies": len(direct) + len(item.data.get("externals", [])),
        }

    # -- search -----------------------------------------------------------------------------

    def hybrid(self, caller: Any, a: Any) -> dict[str, Any]:
        started = time.perf_counter()
        lexical: dict[str, float] = {}
        semantic: dict[str, float] = {}
        text_of: dict[str, str] = {}
        pool = max(50, a.max_results * 5)
        vector = self.ws.query_vector(a.query, "vector" if a.include_semantic else "bm25")  # one for both lists
        for h in self.ws.search_chunks(caller, a.query, "bm25", pool, vector=vector):
            p = str(h.metadata["path"])
            lexical[p] = max(lexical.get(p, 0.0), h.lexical)
            text_of.setdefault(p, h.text)
        if a.include_semantic:
            for h in self.ws.search_chunks(caller, a.query, "vector", pool, vector=vector):
                p = str(h.metadata["path"])
                semantic[p] = max(semantic.get(p, 0.0), h.semantic or 0.0)
                text_of.setdefault(p, h.text)
        distance: dict[str, int] = {}
        if a.include_graph:
            for f in a.context_files:
                for p, d in self.ws.walk(caller, clean_path(f), 3, "bidirectional").items():
                    distance[p] = min(d, distance.get(p, d))
        weights = {
            "lexical": a.lexical_weight,
            "semantic": a.semantic_weight if a.include_semantic else 0.0,
            "graph": a.graph_weight if a.include_graph and a.context_files else 0.0,
        }
        total = sum(weights.values()) or 1.0
        candidates = set(lexical) | set(semantic) | {p for p in distance if p in lexical or p in semantic}
        results = []
        for p in candidates:
            graph = 1.0 / (1 + distance[p]) if p in distance else 0.0
            combined = (
                weights["lexical"] * lexical.get(p, 0.0)
                + weights["semantic"] * semantic.get(p, 0.0)
                + weights["graph"] * graph
            ) / total
            results.append(
                {
                    "path": p,
                    "combined_score": round(combined, 4),
                    "bm25_score": round(lexical.get(p, 0.0), 4),
                    "semantic_score": round(semantic.get(p, 0.0), 4),
                    "graph_score": round(graph, 4),
                    "semantic_similarity": round(semantic.get(p, 0.0), 4),
                    "graph_distance": distance.get(p),
                }
            )
        results.sort(key=lambda r: (-r["combined_score"], r["path"]))
        for r in results[: a.max_results]:  # the words only of what is returned
            r["matching_terms"] = matching_terms(a.query, text_of.get(r["path"], ""))
        return {
            "query": a.query,
            "total_results": min(len(results), a.max_results),
            "results": results[: a.max_results],
            "weights": weights,
            "query_ms": round((time.perf_counter() - started) * 1000, 3),
        }

    def semantic(self, caller: Any, a: Any) -> dict[str, Any]:
        """Files by meaning (each file's best window), and the recorded decisions that match."""
        best: dict[str, tuple[float, int, str]] = {}
        decisions: list[dict[str, Any]] = []
        for h in self.ws.search_chunks(caller, a.query, "vector", max(50, a.max_results * 5), (CHUNK, DECISION)):
            s = h.semantic or 0.0
            if s < a.similarity_threshold:
                continue
            if h.kind == DECISION:
                decisions.append({"decision_id": h.id, "similarity": round(s, 4), "snippet": h.text[:300]})
                continue
            p = str(h.metadata["path"])
            if s > best.get(p, (-1.0, 0, ""))[0]:
                best[p] = (s, int(h.metadata.get("line", 1)), h.text.split("\n", 1)[-1][:300])
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[: a.max_results]
        dim = getattr(self.ws.embedder, "dim", EMBEDDING_DIM) if self.ws.embedder is not None else 0
        return {
            "query": a.query,
            "embedding_model": "all-MiniLM-L6-v2" if self.ws.embedder is not None else None,
            "embedding_dimension": dim,
            "requested": {"embedding_model": a.embedding_model, "embedding_dimension": a.embedding_dimension},
            "similarity_threshold": a.similarity_threshold,
            "total_results": len(ranked),
            "results": [
                {"path": p, "similarity": round(s, 4), "line": line, "snippet": snip} for p, (s, line, snip) in ranked
            ],
            "decisions": decisions[: a.max_results],
        }

    # -- dependencies -----------------------------------------------------------------------

    def dependencies(self, caller: Any, a: Any) -> dict[str, Any]:
        path = clean_path(a.file_path)
        item = self.ws.file(caller, path)
        out: dict[str, Any] = {"file_path": path, "direction": a.direction, "max_depth": a.max_depth}
        if a.direction in ("forward", "bidirectional"):
            fw = self.ws.walk(caller, path, a.max_depth, "forward")
            out["dependencies"] = [
                {"path": p, "depth": d} for p, d in sorted(fw.items(), key=lambda kv: (kv[1], kv[0])) if d > 0
            ]
            out["external_dependencies"] = item.data.get("externals", [])
        if a.direction in ("reverse", "bidirectional"):
            rv = self.ws.walk(caller, path, a.max_depth, "reverse")
            out["dependents"] = [
                {"path": p, "depth": d} for p, d in sorted(rv.items(), key=lambda kv: (kv[1], kv[0])) if d > 0
            ]
        if a.include_impact_analysis:
            affected = self.ws.dependents(caller, path, a.max_depth)
            files = max(1, self.ws.file_count(caller) - 1)
            share = len(affected) / files
            out["impact_analysis"] = {
                "files_affected": len(affected),
                "affected_files": affected,
                "share_of_workspace": round(share, 4),
                "risk": "high" if share > 0.25 else "medium" if affected else "low",
            }
        return out

    # -- context and history ----------------------------------------------------------------

    def context(self, caller: Any, a: Any) -> dict[str, Any]:
        window = parse_window(a.time_range)
        now = self.clock.now()
        since = now - window
        out: dict[str, Any] = {"timestamp": iso(now), "time_range": a.time_range}
        prefix, _ = self.ws.space(caller)
        files = list(scan(self.ws.records, caller.context_id, FILE, prefix=prefix))
        types = set(a.context_types) | ({"active_sessions"} if a.include_active_sessions else set())
        types |= {"performance"} if a.include_metrics and "performance" in a.context_types else set()
        if "project" in types:
            langs: dict[str, int] = {}
            for f in files:
                langs[f.data["language"] or "other"] = langs.get(f.data["language"] or "other", 0) + 1
            tops = sorted({f.data["path"].split("/")[0] for f in files})
            central = sorted(files, key=lambda f: -len(self.ws.dependents_of(caller, f.data["path"])))[:5]
            out["project"] = {
                "files": len(files),
                "lines": sum(int(f.data["lines"]) for f in files),
                "languages": langs,
                "top_level": tops[:50],
                "most_depended_on": [f.data["path"] for f in central if self.ws.dependents_of(caller, f.data["path"])],
            }
        if "recent_changes" in types:
            recent = sorted((f for f in files if f.updated_at >= since), key=lambda f: f.updated_at, reverse=True)
            out["recent_changes"] = [
                {
                    "path": f.data["path"],
                    "version": f.version,
                    "timestamp": int(f.updated_at.timestamp()),
                    "agent_id": f.data["provenance"]["agent_id"],
                    "reason": f.data["provenance"]["reason"],
                }
                for f in recent[:50]
            ]
        if "active_sessions" in types:
            out["active_sessions"] = self.collab.sessions(caller)
        if "performance" in types:
            out["performance"] = self.metrics(caller, ["latency", "throughput", "health"], a.time_range, True)
        if "errors" in types:
            failed = [c for c in self._calls(caller, since.timestamp()) if not c.ok]
            out["errors"] = [{"timestamp": int(c.at), "tool": c.tool, "code": c.code} for c in failed[-50:]]
        return out

    def history(self, caller: Any, a: Any) -> dict[str, Any]:
        is_decision = a.entity_id.startswith("dec_")
        if is_decision:
            item = self.collab.decision(caller, a.entity_id)
            versions = self.ws.records.history(caller.context_id, DECISION, item.id)
        else:
            item = self.ws.file(caller, a.entity_id)
            versions = self.ws.records.history(caller.context_id, FILE, item.id)
        start = parse_time(a.time_range.start) if a.time_range and a.time_range.start else None
        end = parse_time(a.time_range.end) if a.time_range and a.time_range.end else None
        out = []
        previous: str | None = None
        for v in versions:  # oldest first: each diff is from the version before
            text = self._text(v, is_decision)
            change = "create" if v.version == 1 else "update"
            keep = (
                (change in a.change_types)
                and (start is None or v.updated_at >= start)
                and (end is None or v.updated_at <= end)
            )
            if keep:
                entry: dict[str, Any] = {
                    "version": v.version,
                    "change_type": change,
                    "timestamp": int(v.updated_at.timestamp()),
                    "at": iso(v.updated_at),
                    "actor": v.actor,
                }
                if not is_decision:
                    entry |= {
                        "agent_id": v.data["provenance"]["agent_id"],
                        "reason": v.data["provenance"]["reason"],
                        "contributors": v.data["provenance"].get("contributors", []),
                    }
                if a.include_diff:
                    entry["diff"] = "".join(
                        difflib.unified_diff(
                            (previous or "").splitlines(keepends=True),
                            text.splitlines(keepends=True),
                            f"a/{a.entity_id}",
                            f"b/{a.entity_id}",
                        )
                    )
                out.append(entry)
            previous = text
        out.reverse()  # newest first
        return {
            "entity_id": a.entity_id,
            "entity_type": "decision" if is_decision else "file",
            "total_results": len(out[: a.max_results]),
            "history": out[: a.max_results],
        }

    def _text(self, v: Item, is_decision: bool) -> str:
        if is_decision:
            d = v.data
            return f"{d['decision']}\n\n{d['reasoning']}\n"
        return self.ws.content(v)

    # -- measurements -----------------------------------------------------------------------

    def _calls(self, caller: Any, since: float) -> list[Call]:
        """The call log as this caller may see it: its context's calls by keys whose scopes it sees."""
        return calls.since(since, caller.context_id, self.ws.identity.read_lens(caller, None))

    def metrics(
        self, caller: Any, types: Sequence[str], window: str, percentiles: bool, system: bool = False
    ) -> dict[str, Any]:
        span = parse_window(window).total_seconds()
        now = time.time()
        seen = self._calls(caller, now - span)
        ms = [c.ms for c in seen]
        out: dict[str, Any] = {"timestamp": iso(datetime.fromtimestamp(now).astimezone()), "time_window": window}
        if "latency" in types:
            latency: dict[str, Any] = {"unit": "milliseconds", "samples": len(ms)}
            if percentiles:
                latency |= {"p50": _pct(ms, 50), "p95": _pct(ms, 95), "p99": _pct(ms, 99)}
            by_tool: dict[str, list[float]] = {}
            for c in seen:
                by_tool.setdefault(c.tool, []).append(c.ms)
            latency["by_tool"] = {
                t: {"count": len(v), "p50": _pct(v, 50), "p99": _pct(v, 99)} for t, v in sorted(by_tool.items())
            }
            out["latency"] = latency
        if "throughput" in types:
            elapsed = max(1e-9, min(span, now - calls.started))
            out["throughput"] = {
                "requests_per_second": round(len(seen) / elapsed, 3),
                "total_requests": len(self._calls(caller, 0)),
                "requests_in_window": len(seen),
            }
        if "memory" in types:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            out["memory"] = {"peak_usage_mb": round(peak, 1), "current_usage_mb": round(_rss_mb(), 1)}
        if "health" in types:
            errors = sum(1 for c in seen if not c.ok)
            out["health"] = {
                "status": "healthy" if not seen or errors / len(seen) < 0.05 else "degraded",
                "uptime_seconds": int(now - calls.started),
                "error_rate": round(errors / len(seen), 4) if seen else 0.0,
            }
        if system:
            out["system"] = {"cpu_count": os.cpu_count(), "load_average": list(os.getloadavg())}
        return out


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1024 / 1024
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def visible(item: Item | None, lens: list[list[str]]) -> bool:
    return item is not None and can_see(item.data.get("scopes"), lens)


__all__ = ["CodeViews", "InvalidInput", "NotFound"]
