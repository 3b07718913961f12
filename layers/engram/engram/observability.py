"""Structured audit log and in-process metrics. The AWS handlers add Powertools on top."""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from typing import Any

audit_log = logging.getLogger("engram.audit")


class Metrics:
    """Counters by (name, dimensions). Read by tests and the /metrics route."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def incr(self, name: str, **dims: str) -> None:
        with self._lock:
            self.counts[(name, tuple(sorted(dims.items())))] += 1

    def total(self, name: str) -> int:
        with self._lock:
            return sum(v for (n, _), v in self.counts.items() if n == name)

    def drain(self) -> list[tuple[str, dict[str, str], int]]:
        """The counts since the last drain, reset (the Lambda handlers publish them per invocation)."""
        with self._lock:
            out = [(n, dict(d), v) for (n, d), v in sorted(self.counts.items())]
            self.counts.clear()
            return out

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"name": n, "dimensions": dict(d), "value": v} for (n, d), v in sorted(self.counts.items())]


metrics = Metrics()


class Calls:
    """Every operation this process ran in the last MAX calls: (time, tool, milliseconds, ok, error code).
    What `get_performance_metrics` and `get_context` (errors) report: Engram's own measurements, per
    process (per execution environment on Lambda)."""

    MAX = 100_000

    def __init__(self) -> None:
        import time
        from collections import deque

        self._lock = threading.Lock()
        self.started = time.time()
        self.calls: deque[tuple[float, str, float, bool, str]] = deque(maxlen=self.MAX)
        self.total = 0

    def record(self, tool: str, ms: float, ok: bool, code: str = "") -> None:
        import time

        with self._lock:
            self.calls.append((time.time(), tool, ms, ok, code))
            self.total += 1

    def since(self, t: float) -> list[tuple[float, str, float, bool, str]]:
        with self._lock:
            return [c for c in self.calls if c[0] >= t]


calls = Calls()


def audit(event: str, **fields: Any) -> None:
    audit_log.warning(json.dumps({"event": event, **fields}, default=str, sort_keys=True))


def deny(event_fields: dict[str, Any]) -> None:
    """Record an authorization denial: one audit record and one metric."""
    audit("authz.denied", **event_fields)
    metrics.incr("authz.denied", reason=str(event_fields.get("reason", "")))
