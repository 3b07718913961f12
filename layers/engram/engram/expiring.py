"""A small in-process cache whose entries expire after a fixed time: what a process may keep of configuration it
reads on every request (OAuth issuer policies, quotas) and another process may change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
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

    def get_many(self, keys: Sequence[K], load: Callable[[list[K]], dict[K, V]]) -> dict[K, V]:
        """The cached values of `keys`; those missing or expired come from one `load(missing)` call (which
        answers every key it is given)."""
        now = time.monotonic()
        with self._lock:
            cached = {k: self._entries.get(k) for k in keys}
        found = {k: c[1] for k, c in cached.items() if c is not None and c[0] > now}
        missing = [k for k in keys if k not in found]
        if missing:
            loaded = load(missing)
            with self._lock:
                if len(self._entries) + len(missing) > self.max_entries:
                    self._entries.clear()
                for k in missing:
                    self._entries[k] = (now + self.seconds, loaded[k])
            found.update(loaded)
        return found

    def drop(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
