"""The one place adapters are chosen. Everything else receives what it needs."""

from __future__ import annotations

import base64
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast, overload

from engram.families import all_families, family
from engram.families.context import ContextServices
from engram.families.conversation import ConversationServices
from engram.families.entities import EntitiesServices
from engram.families.identity import IdentityServices
from engram.families.knowledge import KnowledgeServices
from engram.families.memory import MemoryServices
from engram.families.records import RecordsServices
from engram.families.workspace import WorkspaceServices
from engram.kernel.clock import Clock, SystemClock
from engram.kernel.family import AnyFamily, Family, Services
from engram.kernel.kinds import Guarded, GuardedIndex, Kinds
from engram.kernel.load import usable_cpus
from engram.kernel.metering import MeteredBlobs, MeteredEmbedder
from engram.kernel.opaque import OpaqueIds
from engram.kernel.ports import AuditLog, BlobStore, Counters, Embedder, Generator, KeySource, RecordStore, SearchIndex
from engram.kernel.queue import Queue, StoreQueue
from engram.kernel.services import Kernel
from engram.search.query_vectors import QueryVectors
from engram.settings import Settings
from engram.trust import peers
from engram.trust.audit import Auditor, Chain, stored_key
from engram.trust.fair import FairShare
from engram.trust.identity import IdentityService
from engram.trust.quotas import Quotas

S = TypeVar("S", bound=Services)
M = TypeVar("M")

T = TypeVar("T")


class Reach(Generic[S, T]):
    """One family service as an attribute of the composition root (`e.memory`, `e.documents`: scripts, benches
    and tests reach a service so; operations and jobs receive their family's Services): typed, and built on
    first use through the root's `services`, so a family's Lambda builds only its own."""

    def __init__(self, services: type[S], pick: Callable[[S], T]) -> None:
        self.of, self.pick = services, pick

    @overload
    def __get__(self, root: None, owner: type[Any]) -> Reach[S, T]: ...
    @overload
    def __get__(self, root: Engram, owner: type[Any]) -> T: ...
    def __get__(self, root: Engram | None, owner: type[Any]) -> Reach[S, T] | T:
        return self if root is None else self.pick(root.services(self.of))


@dataclass
class Engram:
    """The composition root: adapters, the kernel's services, and each family's Services built over them."""

    settings: Settings
    records: RecordStore
    blobs: BlobStore
    index: SearchIndex
    embedder: Embedder | None
    clock: Clock
    generator: Generator | None = None
    # None: a StoreQueue over `records`, made in __post_init__ (a default needs the records)
    queue: Queue = field(default=None)  # type: ignore[assignment]  # a dataclass default made from records
    audit_log: AuditLog | None = None  # None: no audit trail (settings.audit off, or a test's bare root)
    counters: Counters | None = None  # None: quotas are not enforced (a test's bare root)
    # how a cold call's first reads (its quotas, its audit chain's head) are made at once: one request on
    # DynamoDB (engram.adapters.aws.dynamodb_primer); None: each reader starts its own
    first_reads: Callable[[Quotas, str, str], None] | None = None

    def __post_init__(self) -> None:
        self.kinds = Kinds(*(fam.kinds for fam in all_families()))  # every declared kind, made once here
        # Every store behind the kinds' guard, whichever adapter was chosen: an undeclared kind, or a scoped
        # kind without scopes, is refused at run time (engram.kernel.kinds).
        if not isinstance(self.records, Guarded):
            self.records = cast(RecordStore, Guarded(self.records, self.kinds))
        if not isinstance(self.index, GuardedIndex):
            self.index = cast(SearchIndex, GuardedIndex(self.index, self.kinds))
        # what a call's blobs and embeddings cost, in its cost (engram.kernel.metering)
        if not isinstance(self.blobs, MeteredBlobs):
            self.blobs = cast(BlobStore, MeteredBlobs(self.blobs))
        # query vectors kept by text (engram.search.query_vectors), under the meter
        self.query_vectors: QueryVectors | None = None
        if self.embedder is not None and not isinstance(self.embedder, MeteredEmbedder):
            self.query_vectors = QueryVectors(self.embedder)
            self.embedder = cast(Embedder, MeteredEmbedder(self.query_vectors))
        if self.queue is None:
            self.queue = StoreQueue(self.records, self.clock, worker=self.settings.queue_worker)
        self.identity = IdentityService(self.records, self.clock, key_source())
        self.audit = Auditor(self.audit_log, self.clock, self.settings.audit_retention_days, self._audit_chain())
        self.quotas = Quotas(
            self.records, self.counters, self.clock, self.settings.quota_context, self.settings.quota_key
        )
        self.ids = OpaqueIds(self.records, self.clock)  # one per process: every service shares its keys
        # how a server's calls share it between contexts (engram.trust.fair: the API runs each call in a slot), and
        # with `engram serve --workers` the machine between its workers (engram.trust.peers)
        self.share = FairShare(self.settings.call_slots or 2 * usable_cpus(), peers.joined())
        self.kernel = Kernel(
            self.records, self.blobs, self.index, self.embedder, self.clock, self.identity, self.queue, self.ids,
            self.generator, learned=self.settings.extractor == "learned", audit=self.audit, kinds=self.kinds,
        )  # fmt: skip
        self._services: dict[type[Services], Services] = {}

        self._lock = threading.Lock()
        # Each family's services are built when first used, so a family's Lambda builds only its own (the
        # context function never loads memory's or documents'). Their queued jobs may arrive first (a
        # worker, a restart that finds jobs left): each job name leads to its family's service, built on demand.
        for fam in all_families():
            for name, job in fam.jobs.items():
                self.queue.register(
                    name,
                    self._runner(fam, job.handler),
                    batch=self._runner(fam, job.batch) if job.batch else None,
                    passable=job.passable,
                )

    def _runner(self, fam: Family[S], method: Callable[[S], Callable[[Any], None]]) -> Callable[[Any], None]:
        """A job's handler as the queue calls it: the family's services made on its first payload."""
        return lambda payload: self.bound(fam, method)(payload)

    def bound(self, fam: Family[S], method: Callable[[S], M]) -> M:
        """A method of one of a family's services (a job's handler, its eraser, its reindexer), the family's
        services made on first use."""
        return method(self.services(fam.services))

    def _audit_chain(self) -> Chain:
        """The audit chain's key: the deployment's secret (`audit_key`), or one kept in the record store."""
        secret = self.settings.audit_key
        if secret is None:
            return Chain(stored_key(self.records, self.clock))
        key = base64.b64decode(secret.get_secret_value())
        if len(key) < 32:
            raise ValueError("ENGRAM_AUDIT_KEY must be base64 of 32 bytes or more")
        return Chain(lambda: key)

    def prime(self, context_id: str, key_id: str) -> None:
        """A call of `key_id` in `context_id` has arrived (its key already checked): start the reads every call
        makes on a cold instance — its quotas, its audit chain's head — so they overlap with the call's own
        parsing and work (nothing is written; on a warm instance both are cached and this costs nothing)."""
        if self.first_reads is not None:
            self.first_reads(self.quotas, context_id, key_id)
            return
        self.quotas.prime(context_id, key_id)
        self.audit.prime(context_id)

    def services(self, cls: type[S]) -> S:
        """A family's Services over this root, made once."""
        made = self._services.get(cls)
        if made is None:
            with self._lock:
                made = self._services.setdefault(cls, cls(self))
        return cast(S, made)

    def families(self) -> list[AnyFamily]:
        """Every registered family (for what spans them all: an erasure)."""
        return list(all_families())

    def family_services(self, name: str) -> Services:
        made: Services = self.services(family(name).services)
        return made

    def call(self, caller: Any, tool: str, arguments: dict[str, Any]) -> Any:
        """An operation run by its name as a client's call reaches it, its input checked
        (`engram.transfer.importers`)."""
        from engram.families import find

        op = find(tool)
        if op is None:
            raise KeyError(tool)
        return op.run(self.family_services(op.family), caller, op.parse(arguments), lambda *_: None)

    def built(self) -> set[str]:
        """The names of the family services this root has built so far (each is built on first use)."""
        return {name for made in list(self._services.values()) for name in vars(made) if name != "root"}

    # Each family's services, by the name scripts and tests know them by (`engram.families.*.Services`).
    memory = Reach(MemoryServices, lambda s: s.memory)
    causantic = Reach(MemoryServices, lambda s: s.causantic)
    documents = Reach(KnowledgeServices, lambda s: s.documents)
    workctx = Reach(ContextServices, lambda s: s.workctx)
    erasure = Reach(IdentityServices, lambda s: s.erasure)
    subject_access = Reach(IdentityServices, lambda s: s.subject_access)
    transfers = Reach(IdentityServices, lambda s: s.transfers)
    principals = Reach(IdentityServices, lambda s: s.principals)
    conversation = Reach(ConversationServices, lambda s: s.conversation)
    entities = Reach(EntitiesServices, lambda s: s.entities)
    graph = Reach(EntitiesServices, lambda s: s.graph)
    schemas = Reach(RecordsServices, lambda s: s.schemas)
    typed = Reach(RecordsServices, lambda s: s.typed)
    history = Reach(RecordsServices, lambda s: s.history)
    workspace = Reach(WorkspaceServices, lambda s: s.workspace)
    collab = Reach(WorkspaceServices, lambda s: s.collab)
    codeviews = Reach(WorkspaceServices, lambda s: s.codeviews)


# A process-wide cache, kept on purpose (the other process-wide list here is LAZY, below): a loaded model is
# immutable (the same texts give the same vectors whichever root asks), building one costs ~0.4 s and ~100 MB, and
# a process may build many roots over it (a Lambda test process imports eleven functions; a test session builds
# hundreds of roots). It memoises a file's load, as `functools.cache` would; nothing in it changes what a call does.
_EMBEDDERS: dict[str, Embedder] = {}


def default_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "none":
        return None
    if settings.embedder == "bedrock":
        from engram.adapters.aws.bedrock_embedder import BedrockEmbedder

        return BedrockEmbedder(settings.bedrock_embedding_model_id, region=settings.aws_region)
    name = settings.embedder
    if name not in _EMBEDDERS:  # one model per process: loading it costs ~0.3 s
        from engram.adapters.local.onnx_embedder import OnnxMiniLMEmbedder

        _EMBEDDERS[name] = OnnxMiniLMEmbedder(int8_activations=name == "minilm-int8")
    return _EMBEDDERS[name]


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
    client = boto3.client(service, region_name=settings.aws_region, config=config)
    if service == "dynamodb":  # the capacity units each call consumed, in its cost (engram.kernel.metering)
        from engram.adapters.aws.metering import meter_dynamodb

        meter_dynamodb(client)
    return client


def aws_records(settings: Settings, client: Any = None) -> RecordStore:
    from engram.adapters.aws.dynamodb_records import DynamoRecordStore

    return DynamoRecordStore(client or Lazy(lambda: aws_client("dynamodb", settings), "dynamodb"), settings.table)


def key_source() -> KeySource:
    """Where OAuth issuers' signing keys come from: their JWKS over HTTPS, on both adapter sets."""
    from engram.adapters.jwks import HttpKeySource

    return HttpKeySource()


def build_identity(settings: Settings, clock: Clock | None = None) -> IdentityService:
    """Keys, tokens and scopes alone (the Lambda authorizer): no search index, no model."""
    if settings.backend == "aws":
        return IdentityService(aws_records(settings), clock or SystemClock(), key_source())
    from engram.adapters.local.sqlite_records import SqliteRecordStore

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return IdentityService(SqliteRecordStore(settings.data_dir / "records.db"), clock or SystemClock(), key_source())


def opensearch_client(settings: Settings) -> Any:
    from opensearchpy import AWSV4SignerAuth, OpenSearch, RequestsHttpConnection

    from engram.adapters.aws.metering import meter_opensearch

    CLIENTS_MADE["count"] += 1
    if settings.opensearch_service == "none":
        return meter_opensearch(OpenSearch(hosts=[settings.opensearch_url], timeout=30))
    import boto3

    region = settings.aws_region
    auth = AWSV4SignerAuth(boto3.Session().get_credentials(), region, settings.opensearch_service)
    return meter_opensearch(
        OpenSearch(
            hosts=[settings.opensearch_url],
            http_auth=auth,
            use_ssl=True,
            verify_certs=True,
            connection_class=RequestsHttpConnection,
            timeout=30,
        )
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


# Every lazy client of the process, weakly: a SnapStart snapshot is of the whole process, so the hooks that take
# connections and credentials out before it and put them back after a restore must reach every client any root
# or handler of the process made (the authorizer's, the gateway's invoker) — a list per root would miss those.
LAZY: list[weakref.ref[Lazy]] = []


def lazy_clients() -> list[Lazy]:
    """Every lazy client of this process still in use."""
    return [c for c in (r() for r in LAZY) if c is not None]


def build_aws(settings: Settings, clock: Clock | None = None, embedder: Embedder | None = None) -> Engram:
    """DynamoDB, S3, OpenSearch and SQS. boto3 honours AWS_ENDPOINT_URL (a local emulator)."""

    from engram.adapters.aws.dynamodb_audit import DynamoAuditLog
    from engram.adapters.aws.dynamodb_counters import DynamoCounters
    from engram.adapters.aws.dynamodb_primer import DynamoPrimer
    from engram.adapters.aws.dynamodb_records import DynamoRecordStore
    from engram.adapters.aws.opensearch_index import OpenSearchIndex
    from engram.adapters.aws.s3_blobs import S3BlobStore
    from engram.adapters.aws.sqs_queue import SqsQueue

    chosen = embedder if embedder is not None else default_embedder(settings)
    dynamodb = Lazy(lambda: aws_client("dynamodb", settings), "dynamodb")
    records = DynamoRecordStore(dynamodb, settings.table)
    audit_log = DynamoAuditLog(dynamodb, settings.table) if settings.audit else None
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
        audit_log=audit_log,
        counters=DynamoCounters(dynamodb, settings.table),
        first_reads=DynamoPrimer(records, audit_log).prime,
    )


def one_blas_thread() -> None:
    """Numpy's BLAS on one thread for the whole process (#54): the process's parallelism is its requests, the
    encoder's own pools and the graph's builder. BLAS's pool spins on both cores for a while after each product:
    one 14,000 x 384 product (0.3 ms) made the encoder's next pass twice as slow (a stored turn 12 -> 29 ms, a
    query 3.5 -> 6), so a recall beside a store cost two cores for one's work (bench/RESULTS.md, "Many clients")."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def build_local(settings: Settings, clock: Clock | None = None, embedder: Embedder | None = None) -> Engram:
    """The embedded default: SQLite records and search, files for blobs, MiniLM on ONNX."""
    from engram.adapters.local.file_blobs import FileBlobStore
    from engram.adapters.local.sqlite_audit import SqliteAuditLog
    from engram.adapters.local.sqlite_counters import SqliteCounters
    from engram.adapters.local.sqlite_records import SqliteRecordStore
    from engram.adapters.local.sqlite_search import SqliteSearchIndex

    one_blas_thread()
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
        audit_log=SqliteAuditLog(data / "audit.db") if settings.audit else None,
        counters=SqliteCounters(data / "counters.db"),
    )
