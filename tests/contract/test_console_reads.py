"""The reads the console draws (#52), on both adapter sets: memory's facts with their validity windows
(`memory_timeline`), and the graph as a picture (`entity_graph`) — each only what the caller may see."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.families.memory.service import Turn
from engram.wiring import Engram
from tests.contract.conftest import two_agents


def test_the_timeline_keeps_what_was_true_before(both: Engram) -> None:
    e = both
    alice, bob = two_agents(e)
    march, june = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)
    e.memory.store(alice, Turn("I live in Paris.", said_at=march), None)
    e.memory.store(alice, Turn("I moved to Berlin.", said_at=june), None)
    e.memory.store(bob, Turn("I live in Madrid."), None)
    facts = e.memory.timeline(alice, None, "location", 100)["facts"]
    assert [(f["value"], f["valid_until"] is None) for f in facts] == [("Berlin", True), ("Paris", False)]
    paris = facts[1]
    assert paris["valid_from"].startswith("2026-03-01") and paris["valid_until"].startswith("2026-06-01")
    assert paris["status"] == "superseded" and paris["said"] == "I live in Paris."
    assert all(f["value"] != "Madrid" for f in e.memory.timeline(alice, None, None, 100)["facts"])  # bob's
    assert e.memory.timeline(bob, None, "location", 100)["total"] == 1


def test_the_graph_holds_the_callers_entities_and_the_edges_between_them(both: Engram) -> None:
    e = both
    alice, bob = two_agents(e)
    e.memory.store(alice, Turn("I work at Initech and I live in Lisbon."), None)
    e.memory.store(bob, Turn("I work at Globex."), None)
    graph = e.entities.graph(alice, None, 500)
    names = {n["name"] for n in graph["nodes"]}
    assert {"Initech", "Lisbon"} <= names and "Globex" not in names
    ids = {n["id"] for n in graph["nodes"]}
    assert graph["edges"] and all(x["source"] in ids and x["target"] in ids for x in graph["edges"])
    assert "works_at" in {x["type"] for x in graph["edges"]}
    assert len(e.entities.graph(alice, None, 1)["nodes"]) == 1 and graph["total_entities"] == len(graph["nodes"])
    assert "Initech" not in {n["name"] for n in e.entities.graph(bob, None, 500)["nodes"]}
