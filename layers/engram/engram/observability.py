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


def audit(event: str, **fields: Any) -> None:
    audit_log.warning(json.dumps({"event": event, **fields}, default=str, sort_keys=True))


def deny(event_fields: dict[str, Any]) -> None:
    """Record an authorization denial: one audit record and one metric."""
    audit("authz.denied", **event_fields)
    metrics.incr("authz.denied", reason=str(event_fields.get("reason", "")))
