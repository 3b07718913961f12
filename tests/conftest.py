"""Shared fixtures: an embedded Engram per test, and one live HTTP server per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram.api.app import create_app
from engram.cli.devserver import in_thread
from engram.settings import Settings
from engram.wiring import Engram, build_local
from tests.aws import aws_endpoint
from tests.localstack import localstack
from tests.opensearch import opensearch_node
from tests.stack import Deployed, deploy, deployed


@dataclass
class Keys:
    agent: str
    supervisor: str
    management: str
    other_tenant: str
    revoked: str


def make_keys(engram: Engram) -> Keys:
    ident = engram.identity
    agent, _ = ident.create_key(["acme"], "agent", ["org/acme"])
    sup, _ = ident.create_key(["acme"], "supervisor", ["org/acme"])
    mgmt, _ = ident.create_key(["acme"], "management", ["org/acme"])
    other, _ = ident.create_key(["globex"], "management", ["org/globex"])
    revoked, p = ident.create_key(["acme"], "agent", ["org/acme"])
    ident.revoke_key(p.key_id)
    ident.register_scopes("acme", ["org/acme/user/alice", "org/acme/user/bob", "org/acme/project/apollo"])
    return Keys(agent, sup, mgmt, other, revoked)


@pytest.fixture
def engram(tmp_path: Path) -> Engram:
    return build_local(Settings(data_dir=tmp_path / "data"))


@pytest.fixture
def keys(engram: Engram) -> Keys:
    return make_keys(engram)


@dataclass
class Live:
    url: str
    engram: Engram
    keys: Keys


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """`create_app` served by uvicorn on a loopback port, for real HTTP clients."""
    data = tmp_path_factory.mktemp("live")
    engram = build_local(
        Settings(data_dir=data, max_request_bytes=200_000, oauth_allowed_issuers=["https://issuer.example"])
    )
    keys = make_keys(engram)
    with in_thread(create_app(engram)) as url:
        yield Live(url, engram, keys)


# Real engines, each started once per test session (on first use).
@dataclass(frozen=True)
class Aws:
    localstack: str  # every AWS service the tests use but DynamoDB (AWS_ENDPOINT_URL)
    dynamodb: str  # moto's (AWS_ENDPOINT_URL_DYNAMODB)
    stack: Deployed  # template.yaml's resources, deployed into LocalStack


@pytest.fixture(scope="session")
def aws() -> Iterator[Aws]:
    """LocalStack (started here, `tests.localstack`) with the template's resources deployed into it, and moto's
    DynamoDB: this process's (and its children's) AWS clients go there from now on."""
    with localstack() as url, aws_endpoint() as moto:
        given = os.environ.get("TEST_STACK")  # a parent test process's stack (tests on Lambda's Python)
        routes = {"AWS_ENDPOINT_URL": url, "AWS_ENDPOINT_URL_DYNAMODB": moto, "LOCALSTACK_URL": url, "MOTO_URL": moto}
        before = {k: os.environ.get(k) for k in [*routes, "TEST_STACK"]}
        os.environ.update(routes)
        try:
            made = deployed(given) if given else deploy()
            os.environ["TEST_STACK"] = made.name  # what child processes' sessions reuse
            yield Aws(url, moto, made)
        finally:
            for k, v in before.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v


@pytest.fixture(scope="session")
def endpoint(aws: Aws) -> str:
    """The AWS endpoint of every service the tests use (LocalStack's; DynamoDB's is routed to moto by
    `AWS_ENDPOINT_URL_DYNAMODB`, set for the session)."""
    return aws.localstack


@pytest.fixture(scope="session")
def opensearch() -> Iterator[str]:
    """A single-node OpenSearch 2.19.1 with k-NN, or OPENSEARCH_URL."""
    with opensearch_node() as url:
        yield url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Each seed's replay coverage (tests/seeds/), when its module ran."""
    from tests.seeds.coverage import lines

    for line in lines():
        terminalreporter.write_line(line)
