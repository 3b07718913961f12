"""What the memory family's service is built on: a turn, the adapters, embedding and extraction."""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engram.families.memory.extraction import Extraction, extract
from engram.kernel.ports import (
    Vector,
)
from engram.kernel.services import BaseService, Kernel

CATEGORY_SECTION = {"identity": "static", "knowledge": "static", "context": "dynamic", "preference": "preferences"}
FORGET_COSINE = 0.55
CONTEXT_EMBEDDING = True  # see _plan; measured in bench/RESULTS.md
_RETRIES = 200  # as engram.kernel.retry: concurrent writers land one at a time
SAFETY_NET = timedelta(seconds=30)  # a store's index job is due this long after its commit (see Plan.finish)
log = logging.getLogger("engram.memory")


def in_context(previous: str | None, text: str) -> str:
    """What a turn's (or a message's) vector is made of: its text after the one before it in its session, since
    replies are often elliptic ("Yes, last Friday!") and only the turn before says what they are about."""
    return f"{previous}\n{text}" if previous and CONTEXT_EMBEDDING else text


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:64] or "x"


@dataclass(frozen=True)
class Turn:
    content: str
    role: str = "user"
    session_id: str | None = None
    said_at: datetime | None = None
    metadata: dict[str, str | int | float | bool] | None = None
    expires_at: datetime | None = None  # never recalled after, then swept (with the facts it gave)


class MemoryBase(BaseService):
    def __init__(self, kernel: Kernel, cache_size: int = 512) -> None:
        super().__init__(kernel)
        # an answer, and when the first expiring memory in it expires (None: never)
        self._cache: OrderedDict[tuple[Any, ...], tuple[dict[str, Any], datetime | None]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._writers: dict[str, threading.RLock] = {}

    def embed(self, texts: Sequence[str]) -> list[Vector | None]:
        if self.embedder is None or not texts:
            return [None] * len(texts)
        return list(self.embedder.embed(list(texts)))

    @staticmethod
    def subject_of(turn: Turn, tags: Sequence[str]) -> str:
        speaker = (turn.metadata or {}).get("speaker")
        if isinstance(speaker, str) and speaker.strip():
            return speaker.strip()
        for tag in tags:
            parts = tag.split("/")
            if "user" in parts[:-1]:
                return parts[parts.index("user") + 1]
        return turn.role if turn.role not in ("user", "assistant", "system") else "user"

    def _extract(self, content: str) -> Extraction:
        if self.generator is not None:
            from engram.families.memory.llm_extraction import extract_with_llm

            result: Extraction = extract_with_llm(self.generator, content)
            return result
        return extract(content)
