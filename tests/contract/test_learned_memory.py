"""#50: memory's writes read names and relations with the learned extractor, from the encoder pass that embeds
each turn (no second pass), on both adapter sets with the shipped model: what a turn names becomes entities
counted per mention and edges between them, visible only in the turn's scopes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engram.families.memory.service import Turn
from engram.settings import Settings
from engram.wiring import Engram, build_local
from tests.concurrency import together
from tests.contract.conftest import aws_engram_on
from tests.contract.conftest import two_agents as callers

SENTENCE = "My sister Jane Smith works at Acme Corporation in Boston."


@pytest.fixture(params=["local", pytest.param("aws", marks=[pytest.mark.aws, pytest.mark.opensearch])])
def modelled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engram]:
    """Both adapter sets with the shipped encoder (the extractor rides on its pass); no worker."""
    if request.param == "local":
        yield build_local(Settings(data_dir=tmp_path, queue_worker=False))
        return
    aws, opensearch = request.getfixturevalue("aws"), request.getfixturevalue("opensearch")
    mp = pytest.MonkeyPatch()
    yield aws_engram_on(aws, opensearch, mp, tmp_path)
    mp.undo()


class Counting:
    """The service's embedder, with every text each entry point was given written down."""

    def __init__(self, inner: Any, states: bool = True) -> None:
        self.inner, self.embedded, self.read = inner, list[str](), list[str]()
        if states:
            self.embed_with_states = self._with_states

    def embed(self, texts: Sequence[str]) -> Any:
        self.embedded += texts
        return self.inner.embed(texts)

    def _with_states(self, texts: Sequence[str]) -> Any:
        self.read += texts
        return self.inner.embed_with_states(texts)


def test_a_turn_gives_names_and_the_edges_between_them(modelled: Engram) -> None:
    e, (alice, bob) = modelled, callers(modelled)
    out = e.memory.store(alice, Turn(SENTENCE), None)
    assert {tuple(x["id"]) for x in out["entities"]} >= {
        ("Person", "Jane Smith"),
        ("Organization", "Acme Corporation"),
        ("Location", "Boston"),
    }
    edges = {(tuple(r["from"]), r["type"], tuple(r["to"])) for r in out["relations"]}
    assert (("Person", "Jane Smith"), "works_at", ("Organization", "Acme Corporation")) in edges
    jane = e.entities.query(alice, "jane smith", None)["entity"]
    assert jane["type"] == "Person" and jane["mention_count"] == 1
    rels = e.entities.relationships(alice, jane["id"], "outgoing", None)["relationships"]
    assert ("works_at", "Acme Corporation") in {(r["type"], r["target"]["name"]) for r in rels}
    e.memory.store(alice, Turn("Jane Smith called me again today."), None)
    assert e.entities.query(alice, "Jane Smith", None)["entity"]["mention_count"] == 2  # per mention
    assert all(x["name"] != "Jane Smith" for x in e.entities.list(bob, None, "name", 100, 0)["entities"])


def test_one_encoder_pass_a_turn(modelled: Engram) -> None:
    """The turn's vector comes from the pass that read it: the turn's text is never embedded a second time, and
    a batch of turns is read in one call."""
    e, (alice, _) = modelled, callers(modelled)
    counting = Counting(e.memory.embedder)
    e.memory.embedder = counting
    turns = [Turn("Maria Lopez moved to Lisbon.", session_id="s"), Turn("She works for Globex now.", session_id="s")]
    out = e.memory.store_many(alice, turns, None)
    assert len(counting.read) == 2 and counting.read[1].endswith("She works for Globex now.")
    assert not set(counting.read) & set(counting.embedded)  # what was read is not embedded again
    found = e.memory.recall(alice, "Who moved to Portugal's capital?", k=2)["results"]
    assert found and found[0]["id"] == out[0]["turn_id"]  # indexed with the vector the read made


def test_without_token_states_the_rules_alone(modelled: Engram) -> None:
    """An embedder with no token states (Bedrock's) leaves the rules to read the turn; nothing is lost."""
    e, (alice, _) = modelled, callers(modelled)
    counting = Counting(e.memory.embedder, states=False)
    e.memory.embedder = counting
    out = e.memory.store(alice, Turn("Maria Lopez moved to Lisbon."), None)
    assert counting.embedded and not counting.read
    assert ("works_at" not in {r["type"] for r in out["relations"]}) and out["turn_id"]


def test_concurrent_writers_count_every_mention(modelled: Engram) -> None:
    e, (alice, _) = modelled, callers(modelled)

    def work(n: int) -> None:
        e.memory.store(alice, Turn(f"Jane Smith of Acme Corporation phoned about order {n}."), None)

    assert together(12, work) == []
    assert e.entities.query(alice, "Jane Smith", None)["entity"]["mention_count"] == 12
    assert e.entities.query(alice, "Acme Corporation", None)["entity"]["mention_count"] == 12


def test_chat_openers_are_not_entities(modelled: Engram) -> None:
    """Chat's capitalised openers ("Thanks", "Oh", "I've") are no names; the name they greet is one."""
    e, (alice, _) = modelled, callers(modelled)
    out = e.memory.store(alice, Turn("Thanks, Evan! Oh, I've never been to Tokyo. Hey Jolene, how are you?"), None)
    names = {x["id"][1] for x in out["entities"]}
    assert {"Evan", "Tokyo", "Jolene"} <= names
    assert not names & {"Thanks", "Oh", "I've", "Hey Jolene", "Thanks, Evan"}
