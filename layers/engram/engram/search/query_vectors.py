"""Query embeddings kept by text: a read that ranks by meaning embeds its query first (one MiniLM pass, ~5 ms
on a server between requests: the largest part of a recall, issue #26). An agent asks the same question of
several tools (memory, then documents, then conversations) and again after each new turn; the second time, the
vector is kept. Same model, same text: the same vector, so no ranking moves.

Sits under `engram.kernel.metering.MeteredEmbedder`: a call is still charged the embedding it asks for.
Tried and not kept: starting the embedding as the authenticated request arrived, beside the MCP parsing — on
this machine's two vCPUs the model ran ~50 % slower beside the event loop, and a recall over HTTP took 0.6 ms
longer (bench/RESULTS.md, #26).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from engram.kernel.ports import Embedder, Vector

KEEP = 256  # query vectors kept (1.5 KB each)
MAX_CHARS = 1024  # a longer text is a passage being written, not a query: embedded as it comes, never kept


class QueryVectors:
    """An Embedder that keeps the vectors of short single texts (queries), the most recent KEEP."""

    def __init__(self, embedder: Embedder, keep: int = KEEP) -> None:
        self._embedder, self._keep = embedder, keep
        self.model_id, self.dim = embedder.model_id, embedder.dim
        self._vectors: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Vector:
        if len(texts) != 1 or len(texts[0]) > MAX_CHARS:
            return self._embedder.embed(texts)
        text = texts[0]
        with self._lock:
            kept = self._vectors.get(text)
            if kept is not None:
                self._vectors.move_to_end(text)
                return kept[None, :].copy()
        import numpy as np  # here: the authorizer builds a root and never embeds (no numpy in its import)

        vectors = np.asarray(self._embedder.embed([text]), dtype=np.float32)
        with self._lock:
            self._vectors[text] = vectors[0].copy()
            while len(self._vectors) > self._keep:
                self._vectors.popitem(last=False)
        return vectors

    def forget(self) -> None:
        """Drop every kept vector (an erasure: a query may have held the subject's words)."""
        with self._lock:
            self._vectors.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)
