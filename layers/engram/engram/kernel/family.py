"""What a family is, for the composition root and the catalogue (the kernel's part: no family imports here).

A family is a package under `engram/families/<name>/` holding its operations (`operations.py`: declared into its
`OPERATIONS`, an `engram.kernel.operation.Operations`, gathered by `engram.families.catalogue`), its services,
models and job handlers, and, in its `__init__.py`, one `Family` that says:

- `services`: its `Services` class — typed, one cached property per service, built over the composition root
  the first time an operation or a job of the family needs it (a family's Lambda builds only its own);
- `jobs`: each queued job name and the service method that runs it (and a batch method, if any), named
  through the services (`Job(lambda s: s.memory.index_job)`), never by a string;
- `kinds`: the record kinds it owns (`engram.kernel.kinds`: enforced at run time);
- `function`: the Lambda function of `template.yaml` that serves it, and `seeds`: the seed documents whose
  replays (`tests/seeds/test_<seed>.py`) exercise its tools;
- `eraser`: the service method that erases a subject's objects of the family (`engram.trust.erasure`), and
  `reindexer` the one that indexes them all again from the store (`engram.search.reindex`);
- for SnapStart (`engram.api.snapstart`): `clients`, the store clients its requests use (made again after a
  restore), and `warm`, a read its function runs for real before the snapshot.

`engram/families/__init__.py` lists the families: adding one is its folder and one line there, then
`make template-routes` for its REST routes. `tests/unit/test_families.py` walks every family and fails when one
lacks its function, routes, alarms, kinds or seed replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from engram.kernel.kinds import Kind

if TYPE_CHECKING:
    from engram.search.reindex import Reindexer
    from engram.trust.erasure import Eraser
    from engram.wiring import Engram


class Services:
    """Base of a family's services: the composition root it builds over (`self.root`)."""

    def __init__(self, root: Engram) -> None:
        self.root = root


S = TypeVar("S", bound=Services)
Handler = Callable[[dict[str, Any]], None]
BatchHandler = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class Job(Generic[S]):
    """A queued job's handler: the service method that runs one payload, named through the family's services
    (`lambda s: s.memory.index_job`) so the type checker follows it; reaching it builds the service."""

    handler: Callable[[S], Handler]
    batch: Callable[[S], BatchHandler] | None = None  # a method taking every waiting payload of the job at once
    passable: bool = False  # a batch of another job may pass it (engram.kernel.queue.Queue.register)


@dataclass(frozen=True)
class Family(Generic[S]):
    name: str
    services: type[S]
    function: str  # template.yaml's logical id
    jobs: Mapping[str, Job[S]] = field(default_factory=dict)
    kinds: Mapping[str, Kind] = field(default_factory=dict)
    seeds: tuple[str, ...] = ()
    clients: tuple[str, ...] = ("dynamodb", "opensearch", "sqs")
    warm: tuple[str, dict[str, Any]] | None = None  # (tool, arguments)
    # the service method erasing a subject's objects of the family (`engram.trust.erasure`); None: none yet, and
    # an erasure of a subject the family holds objects of is refused
    eraser: Callable[[S], Eraser] | None = None
    # the service method naming the jobs that index every object of the family in a context again, from the
    # store (`engram.search.reindex`); None for a family that puts nothing in the search index
    reindexer: Callable[[S], Reindexer] | None = None

    def service_names(self) -> list[str]:
        """The services the family offers (its Services' public attributes)."""
        return [n for n in dir(self.services) if not n.startswith("_") and n != "root"]


AnyFamily = Family[Any]  # a family whatever its services (the registry's, the root's view)
