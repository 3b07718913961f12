"""Ports: the contracts domain services depend on. Adapters live in `engram.adapters`.

Every adapter of a port passes the same contract suite in `tests/contract/`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from engram.search.rules import Rules

    Vector: TypeAlias = npt.NDArray[np.float32]
else:  # numpy is imported where vectors are made, not by every module naming the type (the authorizer)
    Vector = "npt.NDArray[np.float32]"
MetaValue = str | int | float | bool


@dataclass(frozen=True)
class Item:
    """One version of a versioned item. `version` starts at 1 and grows by one per write."""

    context_id: str
    kind: str
    id: str
    version: int
    data: dict[str, Any]
    actor: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None


@dataclass(frozen=True)
class Write:
    """A conditional write. `expected_version`: None = unconditional, 0 = must not exist, n = latest is n.

    With `check`, nothing is written: the transaction only requires the item to be at `expected_version`
    (DynamoDB's ConditionCheck), so many writers can depend on one item without conflicting with each
    other, only with a writer that changes it.

    With `remove`, the item leaves in the transaction, with its history: for items written once and never
    changed (index entries such as a record's lookup keys), whose history is that one version."""

    context_id: str
    kind: str
    id: str
    data: dict[str, Any]
    actor: str
    expected_version: int | None = None
    expires_at: datetime | None = None
    check: bool = False
    remove: bool = False


@dataclass(frozen=True)
class Page:
    items: list[Item]
    cursor: str | None = None


class RecordStore(Protocol):
    """Versioned items keyed by (context_id, kind, id), with full history.

    Contract:
    - `transact` applies all writes or none; a failed condition raises `Conflict` and leaves no trace.
      It returns the items written, in order (a `check` writes nothing and returns nothing).
    - Each write stores a new version (previous + 1) and keeps every earlier version in `history`.
    - `query` returns latest versions of one kind in one context, ordered by id (ascending unless
      `descending`), optionally restricted to ids starting with `prefix` and to ids between `start` and
      `end` (both inclusive; a key range, never a scan); `cursor` continues a page.
    - Items whose `expires_at` has passed are invisible to `get` and `query` (TTL at read time; `now`
      defaults to the present).
    - `get` and `history` are consistent: they see every committed write (DynamoDB: strongly consistent
      reads of the table). `query` may lag (DynamoDB answers it from a GSI, eventually consistent), so
      work that must be complete reads by key (a document's chunks by the ids it records), and what a
      query finds is acted on with a version check (a queue's claim).
    - Contexts never see each other's items.
    """

    def get(self, context_id: str, kind: str, id: str, now: datetime | None = None) -> Item | None: ...

    def get_many(self, context_id: str, kind: str, ids: Sequence[str], now: datetime | None = None) -> dict[str, Item]:
        """The live items among `ids` (one batched read where the store has one), by id."""
        ...

    max_writes: int
    """The most writes one `transact` call takes (DynamoDB: 50); callers split larger work."""

    def transact(self, writes: Sequence[Write], now: datetime) -> list[Item]: ...

    def history(self, context_id: str, kind: str, id: str) -> list[Item]: ...

    def history_page(self, context_id: str, kind: str, id: str, before: int | None, limit: int) -> list[Item]:
        """Up to `limit` versions below `before` (None: from the latest), newest first: one key range."""
        ...

    def query(
        self,
        context_id: str,
        kind: str,
        *,
        prefix: str = "",
        limit: int = 100,
        cursor: str | None = None,
        descending: bool = False,
        now: datetime | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> Page: ...

    def count(self, context_id: str, kind: str, prefix: str = "", now: datetime | None = None) -> int:
        """How many live latest items of a kind (ids starting with `prefix`) there are, without reading them."""
        ...

    def ids(
        self, context_id: str, kind: str, prefix: str = "", limit: int = 1000, now: datetime | None = None
    ) -> list[str]:
        """The ids of up to `limit` live latest items of a kind (ids starting with `prefix`), in id order,
        without reading the items (a key that names what it holds needs nothing more)."""
        ...

    def version_counts(self, context_id: str, kind: str, ids: Sequence[str]) -> dict[str, int]:
        """How many stored versions each of `ids` has (ids with none left out), without reading them."""
        ...

    def purge(self, context_id: str, kind: str, id: str) -> bool:
        """Physically delete an item and its history. Returns whether it existed."""
        ...

    def purge_many(self, context_id: str, kind: str, ids: Sequence[str]) -> int:
        """`purge` of each of `ids`, batched where the store can: how many of them existed."""

    def expunge(self) -> None:
        """After an erasure: what the store still keeps of deleted items beyond them (a write-ahead log's old
        pages), gone. Nothing to do where deletes are physical at once (DynamoDB)."""

    def restore(self, context_id: str, objects: Sequence[Sequence[Item]]) -> int:
        """Objects brought back whole (`engram.transfer.archive`), each its versions oldest first, kept as given; one
        the store has already is left as it is. Returns how many were written."""

    def squash(self, context_id: str, kind: str, id: str) -> int:
        """Physically delete every version of an item but the latest (an erasure's: what a shared object said
        before it lost a subject's part). Returns how many versions went."""


def scan(records: RecordStore, context_id: str, kind: str, prefix: str = "", page_size: int = 1000) -> Iterator[Item]:
    """Every latest item of a kind (ids starting with `prefix`), following the store's pages."""
    cursor: str | None = None
    while True:
        page = records.query(context_id, kind, prefix=prefix, cursor=cursor, limit=page_size)
        yield from page.items
        if page.cursor is None:
            return
        cursor = page.cursor


@dataclass(frozen=True)
class AuditEntry:
    """One entry of a context's audit log: what happened (`data`: who, which call, which objects, the outcome;
    never a payload), its place in the log (`seq`, from 1), and the hash chain (`prev`: the hash of the entry
    before it, "" for the first; `hash`: this entry's, `engram.trust.audit.seal`)."""

    context_id: str
    seq: int
    at: datetime
    data: dict[str, Any]
    prev: str
    hash: str


@dataclass(frozen=True)
class AuditMark:
    """A context's high-water mark, kept apart from its log (another file; another item): the last entry appended
    (`seq`, `hash`) and when it expires, bound to the deployment's audit key by `mac` (`engram.trust.audit.Chain`)."""

    context_id: str
    seq: int
    hash: str
    expires_at: datetime | None
    mac: str


class Sealer(Protocol):
    """How an adapter seals what it appends (`engram.trust.audit.Chain`: keyed with the deployment's secret)."""

    def entry(
        self, context_id: str, seq: int, at: datetime, data: dict[str, Any], prev: str, prev_expires: datetime | None
    ) -> tuple[dict[str, Any], str]:
        """(the data to store: `data` with the expiry of the entry before it, the entry's hash)."""
        ...

    def mark(self, context_id: str, seq: int, hash: str, expires_at: datetime | None) -> str:
        """The `mac` of a high-water mark."""
        ...


class AuditLog(Protocol):
    """An append-only log per context, hash-chained (`engram.trust.audit`). Appends from many threads and processes
    (and Lambda instances) are serialised per context: each entry takes the next `seq` and chains to the entry
    before it, or the append tries again. With each entry the context's high-water mark moves to it, in the same
    transaction, kept where removing the log's entries does not remove it."""

    def append(
        self, context_id: str, data: dict[str, Any], now: datetime, expires_at: datetime | None, sealer: Sealer
    ) -> AuditEntry:
        """The entry appended (its data and hash from `sealer.entry`), and the mark moved to it."""
        ...

    def mark(self, context_id: str) -> AuditMark | None:
        """The context's high-water mark (None: nothing was ever appended, or it was removed)."""
        ...

    def prime(self, context_id: str) -> None:
        """A call in this context has begun and will append: a store whose append first reads the chain's head
        may start that read now (in the background; nothing is written)."""
        ...

    def entries(
        self,
        context_id: str,
        after: int = 0,
        before: int | None = None,
        limit: int = 1000,
        descending: bool = False,
        now: datetime | None = None,
    ) -> list[AuditEntry]:
        """Up to `limit` entries with `after` < seq < `before`, in seq order (newest first with
        `descending`), expired ones left out."""
        ...


class Counters(Protocol):
    """Atomic counters for quotas (`engram.trust.quotas`): exact under any number of concurrent callers, on one
    machine or across Lambda instances."""

    def add(self, name: str, amount: int, limit: int | None, expires_at: datetime | None, now: datetime) -> int | None:
        """Add `amount` to counter `name` unless that would take it over `limit` (None: no limit): the new
        value, or None (refused, unchanged). A counter past its `expires_at` starts again from 0."""
        ...

    def value(self, name: str, now: datetime) -> int:
        """The counter's value (0 when missing or expired)."""
        ...


class KeySource(Protocol):
    """The signing keys (JWKS, RFC 7517) an OAuth issuer publishes (`engram.trust.oauth`). Only issuers a management
    key configured are ever fetched; fetches are cached with their expiry and forced again (on an unknown
    `kid`) at most every few seconds, so no caller can make the server open connections at will."""

    def keys(self, issuer: str, jwks_uri: str | None, refresh: bool = False) -> list[dict[str, Any]]:
        """The issuer's JWKs (`jwks_uri`, or the one its metadata names). `refresh`: fetch again unless
        fetched very recently. Raises Unavailable when they cannot be fetched."""
        ...


class BlobStore(Protocol):
    """Opaque bytes by key. `put` overwrites; `get` raises `NotFound` for a missing key."""

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, key: str) -> None: ...

    def erase(self, key: str) -> None:
        """Delete a blob physically, every version a versioned store keeps of it (an erasure's)."""
        ...

    def exists(self, key: str) -> bool: ...

    def url(self, key: str, expires_in: int = 3600) -> str | None:
        """A URL a client can download from, or None where the store has none."""
        ...


Clause = Sequence[str]
Selector = Sequence[Clause]  # DNF: [[a, b], [c]] = (a AND b) OR c


@dataclass(frozen=True)
class IndexDoc:
    context_id: str
    kind: str
    id: str
    text: str
    vector: Vector | None = None
    scopes: Sequence[str] = ()
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    metadata: Mapping[str, MetaValue] = field(default_factory=dict)

    def with_vector(self, vector: Vector | None) -> IndexDoc:
        return replace(self, vector=vector)


SearchMode = Literal["bm25", "vector", "hybrid"]


@dataclass(frozen=True)
class SearchQuery:
    """A search within one context.

    `visibility` is a DNF selector already narrowed by the caller's grant; a document matches a
    clause when, for each path of the clause, one of its scopes is that path or lies below it.
    `as_of` (default: now) keeps documents valid at that instant: valid_from <= t < valid_until.
    `metadata` keeps documents whose metadata equals every given value (a list means any of);
    `ranges` keeps those whose metadata value lies in [low, high] (None = open end).
    """

    context_id: str
    text: str = ""
    vector: Vector | None = None
    mode: SearchMode = "hybrid"
    k: int = 10
    kinds: Sequence[str] | None = None
    visibility: Selector | None = None
    as_of: datetime | None = None
    metadata: Mapping[str, MetaValue | Sequence[MetaValue]] = field(default_factory=dict)
    ranges: Mapping[str, tuple[MetaValue | None, MetaValue | None]] = field(default_factory=dict)
    match_all: bool = False  # bm25: every query term must occur (keyword precision)
    group_by: str | None = None  # one hit per value of this metadata key (the best), e.g. "document_id"


Closing = tuple[str, str, datetime | None]
"""(context_id, id, valid_until): a document whose validity ends (or reopens, with None)."""


@dataclass(frozen=True, init=False)
class Hit:
    id: str
    kind: str
    score: float
    text: str
    metadata: Mapping[str, MetaValue]
    scopes: Sequence[str] = ()
    # the evidence `score` combines (`engram.search.rules.scored`), each in [0, 1]; semantic is None when
    # the query had no vector
    lexical: float = 0.0
    semantic: float | None = None
    # a search grouped by a metadata key (`SearchQuery.group_by`): the group's other hits, best first
    passages: tuple[str, ...] = ()

    def __init__(
        self,
        id: str,
        kind: str,
        score: float,
        text: str,
        metadata: Mapping[str, MetaValue],
        scopes: Sequence[str] = (),
        lexical: float = 0.0,
        semantic: float | None = None,
        passages: tuple[str, ...] = (),
    ) -> None:
        # one update of the instance's dict: a search makes hundreds of hits, and the frozen dataclass's own
        # __init__ (a guarded setattr a field) took twice as long (issue #26); still frozen after it
        self.__dict__.update(
            id=id, kind=kind, score=score, text=text, metadata=metadata, scopes=scopes, lexical=lexical,
            semantic=semantic, passages=passages,
        )  # fmt: skip

    def scored(self, score: float, lexical: float, semantic: float | None) -> Hit:
        """This hit with its scores (`dataclasses.replace` without its per-field walk)."""
        return Hit(self.id, self.kind, score, self.text, self.metadata, self.scopes, lexical, semantic, self.passages)


class SearchIndex(Protocol):
    """BM25, vector and hybrid search over documents partitioned by context.

    Score and ordering rules (every adapter):
    - bm25: higher is better (BM25 with English stemming); only documents sharing a term match.
    - vector: cosine similarity of unit vectors, in [-1, 1]; documents without a vector never match.
    - hybrid: `engram.search.rules.hybrid` — the top candidates of both lists fused by the index's `rules`
      (`engram.search.rules.DEFAULT` unless told otherwise, chosen by measurement: bench/protocol.py); with
      `group_by`, one hit per group. Ties break by id so results are deterministic.
    - Results are sorted by descending score, at most `k`, after every filter has been applied.
    - What a result's `score` says is the same in every adapter and mode: `engram.search.rules.scored`
      (in [0, 1]; the raw scores above only rank).
    """

    rules: Rules  # how a hybrid search fuses its two lists (the benches set another to measure it)

    def upsert(self, docs: Sequence[IndexDoc], closing: Sequence[Closing] = ()) -> None:
        """Index `docs` (replacing same ids) and set each `closing` document's valid_until, in one request
        where the engine allows it."""
        ...

    def delete(self, context_id: str, ids: Sequence[str]) -> None: ...

    def set_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None: ...

    def search(self, query: SearchQuery, now: datetime) -> list[Hit]: ...

    def expunge(self) -> None:
        """After an erasure: deleted documents out of what the engine keeps beyond them (a log's old pages,
        OpenSearch segments' deleted documents)."""
        ...

    def count(self, context_id: str) -> int: ...

    def generation(self, context_id: str) -> int | None:
        """A number that changes whenever the context's documents change, by any writer (any process or
        instance on the same storage); None where the engine cannot tell cheaply (then nothing caches
        search results)."""
        ...

    def vectors(self, context_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored vectors of those `ids` in the context that have one, to at least half precision (no
        filters: ids come from a search that applied them)."""
        ...

    def documents(self, context_id: str, after: str | None, limit: int) -> list[IndexDoc]:
        """Up to `limit` of the context's documents with ids after `after`, in id order, with their vectors."""

    def term_counts(self, context_id: str, stems: Sequence[str]) -> tuple[int, Mapping[str, int]]:
        """(How many documents the context holds, how many of them contain each stem): the statistics
        a result's lexical score is weighed with."""
        ...

    def values(self, query: SearchQuery, key: str, now: datetime, most: int) -> dict[str, int] | None:
        """How many of the documents `query` may return (its filters: kinds, visibility, validity, metadata, ranges;
        its text and vector aside) hold each string value of metadata `key`, most first (ties by value); None when
        the query keeps more than `most` documents. What a recall narrows by: the sessions the people a question
        names speak in."""
        ...

    def ensure(self) -> None:
        """Create the index (mappings, analyzers) when it does not exist yet; harmless when it does."""
        ...


class Embedder(Protocol):
    """Text to unit-length float32 vectors. `model_id` names the model that made them."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Vector: ...


class Generator(Protocol):
    """An optional LLM. Services must work when none is configured."""

    def generate(self, system: str, prompt: str, *, max_tokens: int = 512, temperature: float = 0.0) -> str: ...


Progress = Callable[[float, float | None, str | None], None]
"""How far a long operation is: (done, total, message); a transport sends it as MCP progress notifications."""


def no_progress(done: float, total: float | None, message: str | None) -> None:
    return None
