"""Structured audit log and in-process metrics. The AWS handlers add Powertools on top."""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

audit_log = logging.getLogger("engram.trust.audit")


class Metrics:
    """Counters by (name, dimensions). Read by tests and the /metrics route."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()
        self._calls: deque[tuple[str, str, float, bool, int]] = deque(maxlen=1000)

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

    def snapshot(self, contexts: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The counters; with `contexts`, only those of these contexts (a counter names its `context`): what
        one tenant's manager may read. Counters of no context (a request with no valid key) are the operator's."""
        with self._lock:
            counts = sorted(self.counts.items())
        keep = [(n, dict(d), v) for (n, d), v in counts if contexts is None or dict(d).get("context") in contexts]
        return [{"name": n, "dimensions": d, "value": v} for n, d, v in keep]

    # Each call's figures (family, tool, ms, ok, embeddings), kept only where something publishes them: the
    # Lambda handlers turn them into CloudWatch embedded metrics per invocation (`engram.api.lambda_runtime`).
    keep_calls = False

    def call(self, family: str, tool: str, ms: float, ok: bool, embeddings: int) -> None:
        if self.keep_calls:
            with self._lock:
                self._calls.append((family, tool, ms, ok, embeddings))

    def drain_calls(self) -> list[tuple[str, str, float, bool, int]]:
        with self._lock:
            out = list(self._calls)
            self._calls.clear()
            return out


metrics = Metrics()


@dataclass(frozen=True)
class Call:
    at: float  # epoch seconds
    tool: str
    ms: float
    ok: bool
    code: str
    scopes: tuple[str, ...]  # the calling key's grant: who may see this call in the log


class Calls:
    """The operations this process ran, per context (the last MAX of each): what `get_performance_metrics`
    and `get_context` (errors) report — Engram's own measurements, per process (per execution environment on
    Lambda). A call is seen only in its own context, and only by a key that may see its caller's grant
    (`engram.kernel.scopes.can_see`, as every object): one tenant never learns another's tools, counts, latencies or
    failures, nor an agent those of a key whose scopes it cannot see. A call that never reached a context (no
    key, a context the key does not hold) is in nobody's log."""

    MAX = 20_000
    CONTEXTS = 1_000

    def __init__(self) -> None:
        import time

        self._lock = threading.Lock()
        self.started = time.time()
        self._by_context: OrderedDict[str, deque[Call]] = OrderedDict()

    def record(
        self,
        tool: str,
        ms: float,
        ok: bool,
        code: str = "",
        context_id: str | None = None,
        scopes: tuple[str, ...] = (),
    ) -> None:
        import time

        if context_id is None:
            return
        with self._lock:
            log = self._by_context.get(context_id)
            if log is None:
                log = self._by_context[context_id] = deque(maxlen=self.MAX)
                while len(self._by_context) > self.CONTEXTS:
                    self._by_context.popitem(last=False)
            self._by_context.move_to_end(context_id)
            log.append(Call(time.time(), tool, ms, ok, code, scopes))

    def since(self, t: float, context_id: str, visibility: Sequence[Sequence[str]]) -> list[Call]:
        """The calls of `context_id` since `t` that a caller with this visibility selector may see."""
        from engram.kernel.scopes import can_see

        with self._lock:
            log = list(self._by_context.get(context_id, ()))
        return [c for c in log if c.at >= t and can_see(c.scopes, visibility)]

    def clear(self) -> None:
        with self._lock:
            self._by_context.clear()


calls = Calls()


def audit(event: str, **fields: Any) -> None:
    audit_log.warning(json.dumps({"event": event, **fields}, default=str, sort_keys=True))


def deny(event_fields: dict[str, Any]) -> None:
    """Record an authorization denial: one audit record and one metric."""
    audit("authz.denied", **event_fields)
    metrics.incr(
        "authz.denied", reason=str(event_fields.get("reason", "")), context=str(event_fields.get("context_id", ""))
    )
