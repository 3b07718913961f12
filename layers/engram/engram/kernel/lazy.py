"""A module imported on first use: what a declaration or a listing imports costs nothing until a request
needs it (the Lambda gateway lists tools without numpy; issue #16)."""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any


class _Lazy:
    def __init__(self, name: str) -> None:
        self._name, self._lock = name, threading.Lock()
        self._module: ModuleType | None = None

    def _load(self) -> ModuleType:
        if self._module is None:
            with self._lock:
                if self._module is None:
                    self._module = importlib.import_module(self._name)
        assert self._module is not None
        return self._module

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._load(), attr)
        # kept on the proxy: the next read of it is a plain attribute read (`__getattr__` runs only for a
        # missing one), not a call through here (a search reads numpy's names hundreds of times)
        setattr(self, attr, value)
        return value


def module(name: str) -> Any:
    """`name`, imported when an attribute of it is first read."""
    return _Lazy(name)
