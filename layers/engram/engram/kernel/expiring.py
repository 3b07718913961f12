"""A small in-process cache whose entries expire after a fixed time: what a process may keep of configuration it
reads on every request (OAuth issuer policies, quotas) and another process may change."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Expiring(Generic[K, V]):
    def __init__(self, seconds: float, max_entries: int) -> None:
        self.seconds, self.max_entries = seconds, max_entries
        self._entries: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, Future[dict[K, V]]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], V]) -> V:
        """The cached value of `key`, or `load()`'s (kept for `seconds`; a full cache starts again empty)."""
        return self.get_many([key], lambda _: {key: load()})[key]

    def get_many(self, keys: Sequence[K], load: Callable[[list[K]], dict[K, V]]) -> dict[K, V]:
        """The cached values of `keys`; those missing or expired come from one `load(missing)` call (which
        answers every key it is given), or from a `prefetch` of them still under way."""
        now = time.monotonic()
        with self._lock:
            cached = {k: self._entries.get(k) for k in keys}
            ahead = {k: self._loading[k] for k in keys if k in self._loading}
        found = {k: c[1] for k, c in cached.items() if c is not None and c[0] > now}
        for k, future in ahead.items():
            if k not in found:
                with contextlib.suppress(Exception):  # a prefetch that failed: read here
                    found[k] = future.result(timeout=30)[k]
        missing = [k for k in keys if k not in found]
        if missing:
            loaded = load(missing)
            self._keep(missing, loaded, now)
            found.update(loaded)
        return found

    def prefetch(self, keys: Sequence[K], load: Callable[[list[K]], dict[K, V]]) -> None:
        """Start loading the keys not cached (and not being loaded) in a thread of its own: a `get_many` of
        them meanwhile waits for it rather than reading again."""
        now = time.monotonic()
        with self._lock:
            missing = [k for k in keys if k not in self._loading and not self._fresh(k, now)]
            if not missing:
                return
            future: Future[dict[K, V]] = Future()
            for k in missing:
                self._loading[k] = future

        def run() -> None:
            try:
                loaded = load(missing)
            except BaseException as exc:
                with self._lock:
                    for k in missing:
                        if self._loading.get(k) is future:
                            del self._loading[k]
                future.set_exception(exc)
                return
            self._keep([k for k in missing if self._loading.get(k) is future], loaded, now, future)
            future.set_result(loaded)

        threading.Thread(target=run, daemon=True).start()

    def _fresh(self, key: K, now: float) -> bool:
        cached = self._entries.get(key)
        return cached is not None and cached[0] > now

    def _keep(self, keys: list[K], loaded: dict[K, V], now: float, future: Future[dict[K, V]] | None = None) -> None:
        with self._lock:
            if len(self._entries) + len(keys) > self.max_entries:
                self._entries.clear()
            for k in keys:
                if future is not None:
                    if self._loading.get(k) is not future:  # dropped while it loaded: not kept
                        continue
                    del self._loading[k]
                self._entries[k] = (now + self.seconds, loaded[k])

    def drop(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._loading.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._loading.clear()
