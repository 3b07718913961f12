"""A small in-process cache whose entries expire after a fixed time: what a process may keep of configuration it
reads on every request (OAuth issuer policies, quotas) and another process may change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Expiring(Generic[K, V]):
    def __init__(self, seconds: float, max_entries: int) -> None:
        self.seconds, self.max_entries = seconds, max_entries
        self._entries: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], V]) -> V:
        """The cached value of `key`, or `load()`'s (kept for `seconds`; a full cache starts again empty)."""
        now = time.monotonic()
        with self._lock:
            cached = self._entries.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        value = load()
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[key] = (now + self.seconds, value)
        return value

    def drop(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
