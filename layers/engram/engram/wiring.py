"""The one place adapters are chosen. Everything else receives what it needs."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from engram.clock import Clock, SystemClock
from engram.kinds import Guarded, GuardedIndex
from engram.ports import BlobStore, Embedder, Generator, RecordStore, SearchIndex
from engram.queue import Queue, StoreQueue
from engram.services.identity import IdentityService
from engram.settings import Settings

if TYPE_CHECKING:
    from engram.services.causantic import CausanticService
    from engram.services.codeviews import CodeViews
    from engram.services.collab import CollabService
    from engram.services.conversation import ConversationService
    from engram.services.documents import DocumentService
    from engram.services.entities import EntityService
    from engram.services.graph import GraphService
    from engram.services.history import History
    from engram.services.memory import MemoryService
    from engram.services.principals import Principals
    from engram.services.records import RecordService
    from engram.services.schemas import SchemaService
    from engram.services.workctx import WorkingContext
    from engram.services.workspace import WorkspaceService


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
    # None: a StoreQueue over `records`, made in __post_init__ (a default needs the records)
    queue: Queue = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        # Every store behind the kinds' guard, whichever adapter was chosen: an undeclared kind, or a scoped
        # kind without scopes, is refused at run time (engram.kinds).
        if not isinstance(self.records, Guarded):
            self.records = cast(RecordStore, Guarded(self.records))
        if not isinstance(self.index, GuardedIndex):
            self.index = cast(SearchIndex, GuardedIndex(self.index))
        if self.queue is None:
            self.queue = StoreQueue(self.records, self.clock, worker=self.settings.queue_worker)
        self.identity = IdentityService(self.records, self.clock)
        # Each family's services are built when first used, so a family's Lambda builds only its own (the
        # context function never loads memory's or documents'). Their queued jobs may arrive first (a
        # worker, a restart that finds jobs left): each job name leads to its service, built on demand.
        from engram.queue import BLOB_CREATED_JOB
        from engram.services import collab, conversation, documents, entities, graph, memory, records, workspace

        def lazy(service: str, method: str) -> Callable[[Any], None]:
            return lambda payload: getattr(getattr(self, service), method)(payload)

        self.queue.register(memory.INDEX_JOB, lazy("memory", "_index_job"))
        self.queue.register(conversation.INDEX_JOB, lazy("conversation", "_index_job"))
        self.queue.register(records.INDEX_JOB, lazy("typed", "_index_job"))
        self.queue.register(workspace.INDEX_JOB, lazy("workspace", "_index_job"))
        self.queue.register(BLOB_CREATED_JOB, lazy("documents", "_blob_created_job"))
        self.queue.register(graph.JOB, lazy("graph", "_job"))
        self.queue.register(entities.INDEX_JOB, lazy("entities", "_index_job"))
        self.queue.register(collab.DECISION_JOB, lazy("collab", "_decision_job"))
        self.queue.register(
            documents.EMBED_JOB, lazy("documents", "_embed_job"), batch=lazy("documents", "_embed_jobs")
        )

    @cached_property
    def memory(self) -> MemoryService:
        from engram.services.memory import MemoryService

        return MemoryService(
            self.records,
            self.index,
            self.embedder,
            self.clock,
            self.identity,
            self.queue,
            self.generator,
            self.settings.recall_cache_size,
        )

    @cached_property
    def causantic(self) -> CausanticService:
        from engram.services.causantic import CausanticService

        return CausanticService(self.memory, self.settings.token_budget)

    @cached_property
    def workctx(self) -> WorkingContext:
        from engram.services.workctx import WorkingContext

        return WorkingContext(self.records, self.clock, self.identity)

    @cached_property
    def schemas(self) -> SchemaService:
        from engram.services.schemas import SchemaService

        return SchemaService(self.records, self.clock)

    @cached_property
    def typed(self) -> RecordService:
        """Typed records (Vectros' `record_*` tools); `records` is the record store they live in."""
        from engram.services.records import RecordService

        return RecordService(
            self.records, self.index, self.embedder, self.clock, self.identity, self.schemas, self.queue
        )

    @cached_property
    def principals(self) -> Principals:
        from engram.services.principals import Principals

        return Principals(self.identity, self.schemas, self.typed)

    @cached_property
    def workspace(self) -> WorkspaceService:
        from engram.services.workspace import WorkspaceService

        return WorkspaceService(
            self.records, self.blobs, self.index, self.embedder, self.clock, self.identity, self.queue
        )

    @cached_property
    def collab(self) -> CollabService:
        from engram.services.collab import CollabService

        return CollabService(self.records, self.index, self.embedder, self.clock, self.identity, self.workspace)

    @cached_property
    def codeviews(self) -> CodeViews:
        from engram.services.codeviews import CodeViews

        return CodeViews(self.workspace, self.collab, self.clock)

    @cached_property
    def history(self) -> History:
        from engram.services.history import History

        return History(self.records, self.identity)

    @cached_property
    def graph(self) -> GraphService:
        from engram.services.graph import GraphService

        return GraphService(self.records, self.index, self.embedder, self.clock, self.queue, self.generator)

    @cached_property
    def entities(self) -> EntityService:
        from engram.services.entities import EntityService

        return EntityService(self.records, self.index, self.embedder, self.clock, self.identity, self.queue)

    @cached_property
    def conversation(self) -> ConversationService:
        from engram.services.conversation import ConversationService

        return ConversationService(
            self.records, self.index, self.embedder, self.clock, self.identity, self.queue, self.generator, self.memory
        )

    @cached_property
    def documents(self) -> DocumentService:
        from engram.services.documents import DocumentService

        return DocumentService(
            self.records,
            self.blobs,
            self.index,
            self.embedder,
            self.clock,
            self.identity,
            self.queue,
            self.generator,
            self.schemas,
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


def build(settings: Settings, clock: Clock | None = None, embedder: Embedder | None = None) -> Engram:
    """The adapters `settings.backend` names."""
    if settings.backend == "aws":
        return build_aws(settings, clock, embedder)
    return build_local(settings, clock, embedder)


CLIENTS_MADE = {"count": 0}  # every store client this process made (the SnapStart test counts them)


def aws_client(service: str, settings: Settings) -> Any:
    """A boto3 client that retries throttling and transient errors with exponential backoff."""
    import boto3
    from botocore.config import Config

    CLIENTS_MADE["count"] += 1
    config = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)
    return boto3.client(service, region_name=settings.aws_region, config=config)


def aws_records(settings: Settings) -> RecordStore:
    from engram.adapters.aws.dynamodb_records import DynamoRecordStore

    return DynamoRecordStore(Lazy(lambda: aws_client("dynamodb", settings), "dynamodb"), settings.table)


def build_identity(settings: Settings, clock: Clock | None = None) -> IdentityService:
    """Keys and scopes alone (the Lambda authorizer): no search index, no model."""
    if settings.backend == "aws":
        return IdentityService(aws_records(settings), clock or SystemClock())
    from engram.adapters.local.sqlite_records import SqliteRecordStore

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return IdentityService(SqliteRecordStore(settings.data_dir / "records.db"), clock or SystemClock())


def opensearch_client(settings: Settings) -> Any:
    from opensearchpy import AWSV4SignerAuth, OpenSearch, RequestsHttpConnection

    CLIENTS_MADE["count"] += 1
    if settings.opensearch_service == "none":
        return OpenSearch(hosts=[settings.opensearch_url], timeout=30)
    import boto3

    region = settings.aws_region
    auth = AWSV4SignerAuth(boto3.Session().get_credentials(), region, settings.opensearch_service)
    return OpenSearch(
        hosts=[settings.opensearch_url],
        http_auth=auth,
        use_ssl=True,
        verify_certs=True,
        connection_class=RequestsHttpConnection,
        timeout=30,
    )


_REFRESH: dict[str, bool | str] = {"true": True, "wait_for": "wait_for", "false": False}


class Lazy:
    """A client made on first use: a function that never searches, stores files or queues jobs (the
    gateway, identity) never imports opensearch-py (~0.4 s of a cold start) nor makes those boto3 clients
    (~0.1 s each). Every one is listed in LAZY, so a snapshot can be taken without them (`reset`: no
    connection or credentials in it) and a restored environment can make them all before its first request
    (`ready`)."""

    def __init__(self, make: Callable[[], Any], service: str = "") -> None:
        self._make, self._client, self.service = make, None, service
        self._lock = threading.Lock()
        LAZY.append(weakref.ref(self))

    def ready(self) -> Any:
        if self._client is None:
            with self._lock:  # boto3's default session does not make clients safely from two threads
                if self._client is None:
                    self._client = self._make()
        return self._client

    def reset(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        close = getattr(client, "close", None)
        if callable(close):
            close()

    def suspend(self) -> None:
        """Before a snapshot: a boto3 client is kept (its service model, endpoint rules and request
        machinery stay warm) with its connections closed and its credentials taken out; any other client is
        dropped (`reset`)."""
        client = self._client
        signer = getattr(client, "_request_signer", None)
        endpoint = getattr(client, "_endpoint", None)
        if signer is None or endpoint is None or not hasattr(signer, "_credentials"):
            self.reset()
            return
        endpoint.http_session.close()  # its pools: made again by the first request after the restore
        signer._credentials = None

    def resume(self, credentials: Any, make: bool) -> None:
        """After a restore: a kept boto3 client gets this environment's credentials; a dropped client is
        made anew when `make` (the function's requests use it)."""
        signer = getattr(self._client, "_request_signer", None)
        if signer is not None:
            signer._credentials = credentials
        elif make:
            self.ready()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ready(), name)


def forget_credentials() -> None:
    """Drop the credentials boto3's default session resolved (before a snapshot)."""
    import boto3

    session = boto3.DEFAULT_SESSION
    if session is not None:
        session._session._credentials = None


def fresh_credentials() -> Any:
    """This environment's credentials, resolved again by boto3's default session (after a restore)."""
    import boto3

    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    session = boto3.DEFAULT_SESSION
    assert session is not None
    session._session._credentials = None
    return session._session.get_credentials()


LAZY: list[weakref.ref[Lazy]] = []


def lazy_clients() -> list[Lazy]:
    """Every lazy client of this process still in use."""
    return [c for c in (r() for r in LAZY) if c is not None]


def build_aws(settings: Settings, clock: Clock | None = None, embedder: Embedder | None = None) -> Engram:
    """DynamoDB, S3, OpenSearch and SQS. boto3 honours AWS_ENDPOINT_URL (a local emulator)."""

    from engram.adapters.aws.opensearch_index import OpenSearchIndex
    from engram.adapters.aws.s3_blobs import S3BlobStore
    from engram.adapters.aws.sqs_queue import SqsQueue

    chosen = embedder if embedder is not None else default_embedder(settings)
    records = aws_records(settings)
    return Engram(
        settings=settings,
        records=records,
        blobs=S3BlobStore(Lazy(lambda: aws_client("s3", settings), "s3"), settings.bucket),
        index=OpenSearchIndex(
            Lazy(lambda: opensearch_client(settings), "opensearch"),
            settings.opensearch_index,
            dim=chosen.dim if chosen is not None else 384,
            # Serverless: no refresh, no document ids of ours (see the adapter)
            refresh=False if settings.opensearch_service == "aoss" else _REFRESH[settings.opensearch_refresh],
            custom_ids=settings.opensearch_service != "aoss",
        ),
        embedder=chosen,
        clock=clock or SystemClock(),
        generator=build_generator(settings),
        queue=SqsQueue(Lazy(lambda: aws_client("sqs", settings), "sqs"), settings.queue_url, records)
        if settings.queue_url
        else StoreQueue(records, clock or SystemClock(), worker=settings.queue_worker),
    )


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
