"""What every family's services are built on: the adapters the composition root chose (`engram.wiring`) and the
kernel's own services, handed over as one `Kernel`. A domain service subclasses `BaseService` and names only
what it adds (another service it uses, a setting)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engram.kernel.clock import Clock
from engram.kernel.kinds import Kinds
from engram.kernel.opaque import OpaqueIds
from engram.kernel.ports import BlobStore, Embedder, Generator, RecordStore, SearchIndex
from engram.kernel.queue import Queue

if TYPE_CHECKING:  # the trust features' services, named for the type checker (the root hands them over)
    from engram.trust.audit import Auditor
    from engram.trust.identity import IdentityService


@dataclass(frozen=True)
class Kernel:
    records: RecordStore
    blobs: BlobStore
    index: SearchIndex
    embedder: Embedder | None
    clock: Clock
    identity: IdentityService
    queue: Queue  # its jobs' handlers are registered by the composition root, never by a service
    ids: OpaqueIds  # ids made from words, keyed (`engram.kernel.opaque`): one per process, its keys shared
    generator: Generator | None = None  # a model (Bedrock) where one is configured; else the rules
    learned: bool = True  # memory's writes read names with the learned extractor too (settings.extractor)
    audit: Auditor | None = None  # what background work did, in the context's trail (memory's expiry sweeps)
    kinds: Kinds = field(default_factory=Kinds)  # every declared kind (the root's catalogue: `engram.kernel.kinds`)


class BaseService:
    """A domain service: the kernel's parts as its attributes."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.records, self.blobs, self.index, self.embedder = (
            kernel.records,
            kernel.blobs,
            kernel.index,
            kernel.embedder,
        )
        self.clock, self.identity, self.queue, self.generator = (
            kernel.clock,
            kernel.identity,
            kernel.queue,
            kernel.generator,
        )
        self.ids = kernel.ids
        self.audit = kernel.audit
        self.learned = kernel.learned
        self.kinds = kernel.kinds
        self.sleep = time.sleep  # the pause between conflicting writes' retries (a test may make it instant)
