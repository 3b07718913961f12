"""Fixtures of the contract suites: the same Engram services over each set of adapters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram.kernel.caller import ANY, Caller
from engram.settings import Settings
from engram.wiring import Engram, build, build_local
from tests import stack
from tests.conftest import Aws


@pytest.fixture(params=["local", pytest.param("aws", marks=[pytest.mark.aws, pytest.mark.opensearch])])
def both(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engram]:
    """Local (SQLite, files) or AWS (DynamoDB + S3 on moto, OpenSearch on the test node); no model, no worker."""
    if request.param == "local":
        yield build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False))
        return
    aws, opensearch = request.getfixturevalue("aws"), request.getfixturevalue("opensearch")
    mp = pytest.MonkeyPatch()
    yield aws_engram_on(aws, opensearch, mp, tmp_path, embedder="none")
    mp.undo()


def aws_engram_on(aws: Aws, opensearch: str, mp: pytest.MonkeyPatch, tmp_path: Path, **settings: object) -> Engram:
    """Engram on a fresh table and bucket as template.yaml defines them (moto's DynamoDB, LocalStack's S3:
    `tests.stack`) and an OpenSearch index of the test node; no worker."""
    name = stack.table()
    stack.bucket(aws.stack, name)
    return build(
        Settings(
            backend="aws",
            table=name,
            bucket=name,
            opensearch_url=opensearch,
            opensearch_index=name,
            opensearch_service="none",
            data_dir=tmp_path,
            queue_worker=False,
            **settings,  # type: ignore[arg-type]
        )
    )


ALICE, BOB = "org/acme/user/alice", "org/acme/user/bob"


def two_agents(e: Engram) -> tuple[Caller, Caller]:
    """Alice and Bob: agents of context `acme` with grants of their own (org/acme/user/alice, .../bob)."""
    e.identity.register_scopes("acme", [ALICE, BOB])
    keys = [e.identity.create_key(["acme"], "agent", [g])[1] for g in (ALICE, BOB)]
    alice, bob = (e.identity.enter(p, "acme", ANY, "t") for p in keys)
    return alice, bob


def eid(e: Engram, etype: str, name: str, ctx: str = "acme") -> str:
    """The id the context gives the entity of this type and name (`engram.kernel.opaque`: it holds nothing of
    the name)."""
    return e.ids.entity(ctx, etype, name)


def rid(e: Engram, subject: str, rtype: str, target: str, ctx: str = "acme") -> str:
    """The id of memory's edge from its subject to a value (`engram.families.memory.plan.Plan.relation_id`)."""
    from engram.families.memory.base import _slug

    return e.ids.relation(ctx, "memory", _slug(subject), rtype, _slug(target))
