"""Cortex's entities (`engram.families.entities.service`) over the graph memory writes, on both adapter sets:
lookups by name or alias (case and accents aside), search, relationships, updates, merges, listing, scopes."""

from __future__ import annotations

import pytest

from engram.families.memory.service import Turn
from engram.kernel.caller import Caller
from engram.kernel.errors import InvalidInput, NotFound
from engram.wiring import Engram
from tests.contract.conftest import ALICE, BOB  # noqa: F401
from tests.contract.conftest import two_agents as callers


def said(e: Engram, caller: Caller, *texts: str) -> None:
    for text in texts:
        e.memory.store(caller, Turn(text, metadata={"speaker": "Bob"}), None)


def test_lookup_search_update_and_list(both: Engram) -> None:
    e, (_, bob) = both, callers(both)
    said(e, bob, "I work at Acme Corp. My wife is Zoë.", "My wife is Zoë.")
    ent = e.entities
    zoe = ent.query(bob, "ZOE", None)["entity"]  # case and accents aside
    assert zoe["name"] == "Zoë" and zoe["type"] == "Person" and zoe["mention_count"] == 2
    with pytest.raises(NotFound):
        ent.query(bob, "Zoë", "Organization")
    acme = ent.query(bob, "acme corp", "organization")["entity"]
    update = ent.update(bob, acme["id"], "Acme Corporation", "Technology company founded in 2010", {"hq": "Oslo"})
    assert update == {"entity_id": acme["id"], "updated_fields": ["name", "description", "metadata"]}
    assert ent.update(bob, acme["id"], None, None, {"size": 50})["updated_fields"] == ["metadata"]
    again = ent.query(bob, "Acme Corp", None)["entity"]  # the old name is an alias now
    assert again["id"] == acme["id"] and again["name"] == "Acme Corporation" and again["aliases"] == ["Acme Corp"]
    assert again["metadata"] == {"hq": "Oslo", "size": 50} and again["description"].startswith("Technology")
    found = ent.search(bob, "technology company", None, 5)["results"]
    assert found and found[0]["id"] == acme["id"] and 0 < found[0]["score"] <= 1
    listed = ent.list(bob, None, "mention_count", 2, 0)
    assert listed["total"] >= 3 and listed["has_more"] is True and listed["entities"][0]["mention_count"] >= 2
    names = [x["name"] for x in ent.list(bob, None, "name", 100, 0)["entities"]]
    assert names == sorted(names, key=str.casefold)
    assert [x["type"] for x in ent.list(bob, "person", "name", 100, 0)["entities"]] == ["Person"] * 2
    with pytest.raises(NotFound):
        ent.update(bob, "Person:nobody", None, "x", None)


def test_relationships_and_a_merge_that_moves_everything(both: Engram) -> None:
    e, (_, bob) = both, callers(both)
    said(e, bob, "My wife is Jane Smith.", "My sister is Janie.", "My wife is Janie.")
    ent = e.entities
    jane, janie = ent.query(bob, "jane smith", None)["entity"], ent.query(bob, "janie", None)["entity"]
    rels = ent.relationships(bob, "Person:bob", "outgoing", None)["relationships"]
    assert {(r["type"], r["target"]["name"]) for r in rels} >= {("wife", "Jane Smith"), ("sister", "Janie")}
    incoming = ent.relationships(bob, janie["id"], "incoming", None)["relationships"]
    assert {r["type"] for r in incoming} == {"sister", "wife"} and all(r["direction"] == "incoming" for r in incoming)
    assert ent.relationships(bob, janie["id"], "outgoing", None)["relationships"] == []
    out = ent.merge(bob, jane["id"], janie["id"])
    assert out["kept_entity_id"] == jane["id"] and out["removed_entity_id"] == janie["id"]
    assert out["aliases_merged"] == 1 and out["relationships_transferred"] == 1  # "wife" was there already
    kept = ent.query(bob, "Janie", None)["entity"]  # the removed name leads to the kept entity
    assert kept["id"] == jane["id"] and kept["aliases"] == ["Janie"] and kept["mention_count"] == 3
    kinds = sorted(r["type"] for r in ent.relationships(bob, jane["id"], "incoming", None)["relationships"])
    assert kinds == ["sister", "wife"]  # no duplicate "wife"
    assert ent.relationships(bob, janie["id"], "both", None)["entity_id"] == jane["id"]  # the old id follows
    assert janie["id"] not in {x["id"] for x in ent.list(bob, None, "name", 100, 0)["entities"]}
    said(e, bob, "My sister is Janie.")  # a later mention of the removed name counts for the kept one
    assert ent.query(bob, "jane smith", None)["entity"]["mention_count"] == 4
    with pytest.raises(InvalidInput):
        ent.merge(bob, jane["id"], janie["id"])  # both ids are the same entity now


def test_another_scope_set_sees_no_entity(both: Engram) -> None:
    e, (alice, bob) = both, callers(both)
    said(e, bob, "My wife is Carol.")
    ent = e.entities
    with pytest.raises(NotFound):
        ent.query(alice, "carol", None)
    assert ent.list(alice, None, "name", 100, 0) == {"entities": [], "total": 0, "has_more": False}
    assert ent.search(alice, "carol", None, 10)["results"] == []
    for call in (
        lambda: ent.relationships(alice, "Person:carol", "both", None),
        lambda: ent.update(alice, "Person:carol", None, "mine now", None),
        lambda: ent.merge(alice, "Person:carol", "Person:bob"),
    ):
        with pytest.raises(NotFound):
            call()
    # untouched: what Bob reads is drawn from his own sentence (issue #23), not from Alice's refused update
    assert ent.query(bob, "carol", None)["entity"]["description"] == "My wife is Carol."


def test_concurrent_updates_each_land(both: Engram) -> None:
    """Twenty writers add their own metadata field to one entity at once (while memory mentions it too)."""
    from tests.concurrency import together

    e, (_, bob) = both, callers(both)
    said(e, bob, "My wife is Carol.")

    def work(n: int) -> None:
        if n == 0:
            said(e, bob, "My wife is Carol.")
        else:
            e.entities.update(bob, "Person:carol", None, None, {f"field{n}": n})

    assert together(20, work) == []
    carol = e.entities.query(bob, "carol", None)["entity"]
    assert carol["metadata"] == {f"field{n}": n for n in range(1, 20)} and carol["mention_count"] == 2
