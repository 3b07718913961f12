"""The one place adapters are chosen. Everything else receives what it needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from engram.clock import Clock, SystemClock
from engram.ports import BlobStore, Embedder, Generator, RecordStore, SearchIndex
from engram.queue import Queue, ThreadQueue
from engram.services.causantic import CausanticService
from engram.services.documents import DocumentService
from engram.services.identity import IdentityService
from engram.services.memory import MemoryService
from engram.settings import Settings


@dataclass
class Engram:
    """Services, built over one set of adapters."""

    settings: Settings
    records: RecordStore
    blobs: BlobStore
    index: SearchIndex
    embedder: Embedder | None
    clock: Clock
    generator: Generator | None = None
    queue: Queue = field(default_factory=ThreadQueue)

    def __post_init__(self) -> None:
        self.identity = IdentityService(self.records, self.clock)
        self.memory = MemoryService(
            self.records,
            self.index,
            self.embedder,
            self.clock,
            self.identity,
            self.generator,
            self.settings.recall_cache_size,
        )
        self.causantic = CausanticService(self.memory, self.settings.token_budget)
        self.documents = DocumentService(
            self.records,
            self.blobs,
            self.index,
            self.embedder,
            self.clock,
            self.identity,
            self.queue,
            self.generator,
        )


_EMBEDDERS: dict[str, Embedder] = {}


def default_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "none":
        return None
    if settings.embedder == "bedrock":
        from engram.adapters.aws.bedrock_embedder import BedrockEmbedder

        return BedrockEmbedder(settings.bedrock_embedding_model_id, region=settings.aws_region)
    if "minilm" not in _EMBEDDERS:  # one model per process: loading it costs ~0.3 s
        from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder

        _EMBEDDERS["minilm"] = OnnxMiniLMEmbedder()
    return _EMBEDDERS["minilm"]


def build_generator(settings: Settings) -> Generator | None:
    if settings.generator == "bedrock":
        from engram.adapters.aws.bedrock import BedrockGenerator

        return BedrockGenerator(settings.bedrock_model_id, settings.aws_region)
    return None


def build_local(settings: Settings, clock: Clock | None = None, embedder: Embedder | None = None) -> Engram:
    """The embedded default: SQLite records and search, files for blobs, MiniLM on ONNX."""
    from engram.adapters.local.file_blobs import FileBlobStore
    from engram.adapters.local.sqlite_records import SqliteRecordStore
    from engram.adapters.local.sqlite_search import SqliteSearchIndex

    data = settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    return Engram(
        settings=settings,
        records=SqliteRecordStore(data / "records.db"),
        blobs=FileBlobStore(data / "blobs"),
        index=SqliteSearchIndex(data / "search.db"),
        embedder=embedder if embedder is not None else default_embedder(settings),
        clock=clock or SystemClock(),
        generator=build_generator(settings),
    )
