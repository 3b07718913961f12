"""Shared fixtures: an embedded Engram per test, and one live HTTP server per session."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engram.api.app import create_app
from engram.devserver import in_thread
from engram.settings import Settings
from engram.wiring import Engram, build_local
from tests.aws import aws_endpoint
from tests.opensearch import opensearch_node


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
@pytest.fixture(scope="session")
def endpoint() -> Iterator[str]:
    """A local AWS API emulator (moto server), or AWS_ENDPOINT_URL."""
    with aws_endpoint() as url:
        yield url


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
