"""What one call cost (issue #28): counted while it runs, returned with its result (`_meta` on MCP, headers on
REST), kept in its audit entry for `usage_report`, and sent to CloudWatch on AWS.

A call runs inside `metering()`; whatever it touches charges the call's `Cost` through `charge` — the record
store's reads and writes and the search index's calls (the composition root's guards), the blob store's gets
and puts, the embedder's embeddings (`Metered*` below), and on AWS the capacity units DynamoDB reports and the
requests sent to OpenSearch (the AWS adapters' client hooks). Work done later by a queued job is its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any

from engram.kernel.ports import Vector


@dataclass
class Cost:
    server_ms: float = 0.0
    embeddings: int = 0  # texts embedded by this call (a cached query embedding is not one)
    tokens_in: int = 0  # approximate (4 characters a token): the call's arguments
    tokens_out: int = 0  # ... and its result
    store_reads: int = 0  # record store reads (a point read, a query page, a batch)
    store_writes: int = 0  # records written (each item of a transaction)
    read_units: float = 0.0  # DynamoDB read capacity units it reported (AWS)
    write_units: float = 0.0  # DynamoDB write capacity units (AWS)
    blob_gets: int = 0
    blob_puts: int = 0
    index_calls: int = 0  # search index calls (searches, upserts, deletes)
    opensearch_requests: int = 0  # HTTP requests to OpenSearch (AWS)

    def figures(self) -> dict[str, float | int]:
        out = asdict(self)
        out["server_ms"] = round(self.server_ms, 2)
        out["read_units"], out["write_units"] = round(self.read_units, 2), round(self.write_units, 2)
        return out


FIELDS = tuple(Cost.__dataclass_fields__)
_CURRENT: ContextVar[Cost | None] = ContextVar("engram_cost", default=None)


def charge(field: str, amount: float = 1) -> None:
    """Add to the running call's cost (nothing outside a call)."""
    cost = _CURRENT.get()
    if cost is not None:
        setattr(cost, field, getattr(cost, field) + amount)


@contextmanager
def metering(cost: Cost) -> Iterator[Cost]:
    token = _CURRENT.set(cost)
    try:
        yield cost
    finally:
        _CURRENT.reset(token)


def tokens(value: Any) -> int:
    """Approximate tokens of a JSON value (its text's length / 4, as OpenAI's rule of thumb)."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return math.ceil(len(text) / 4)


def header(cost: Cost) -> str:
    """The `X-Engram-Cost` header of a REST answer: `name=value` pairs, comma-separated."""
    return ", ".join(f"{k.replace('_', '-')}={v}" for k, v in cost.figures().items())


class MeteredBlobs:
    """A blob store whose gets and puts charge the running call."""

    def __init__(self, blobs: Any) -> None:
        self._blobs = blobs

    def get(self, key: str) -> bytes:
        charge("blob_gets")
        data: bytes = self._blobs.get(key)
        return data

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        charge("blob_puts")
        self._blobs.put(key, data, content_type)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._blobs, name)


class MeteredEmbedder:
    """An embedder whose embeddings charge the running call."""

    def __init__(self, embedder: Any) -> None:
        self._embedder = embedder

    def embed(self, texts: Sequence[str]) -> Vector:
        charge("embeddings", len(texts))
        vectors: Vector = self._embedder.embed(texts)
        return vectors

    def __getattr__(self, name: str) -> Any:
        inner = getattr(self._embedder, name)  # AttributeError when the embedder has none: callers fall back
        if name != "embed_with_states":
            return inner

        def embed_with_states(texts: Sequence[str]) -> Any:
            charge("embeddings", len(texts))  # one pass gives both: charged as the embedding it is
            return inner(texts)

        return embed_with_states
