"""#49, ids carry no content (DESIGN §9), on both adapter sets: an entity's id and an edge's hold nothing of the
names they were made from (audit entries, logs and URLs hold ids); the key is the context's own; writers racing
on one new name meet on one entity; and what Engram stored under the old ids (`Person:jane smith`) still
resolves and is still the entity new mentions count on."""

from __future__ import annotations

from engram.families.knowledge.documents import NewDocument
from engram.families.memory.base import Turn
from engram.kernel.opaque import OpaqueIds
from engram.kernel.ports import Write
from engram.wiring import Engram
from tests.concurrency import together
from tests.contract.conftest import ALICE, eid, two_agents

NAMES = ("jane", "smith", "acme", "lisbon", "berlin")


def test_entity_and_edge_ids_hold_no_word_of_the_names(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    e.memory.store(alice, Turn("I work at Acme Corporation and I live in Lisbon. My sister is Jane Smith."), [[ALICE]])
    e.documents.ingest(alice, NewDocument(b"Jane Smith works at Acme Corporation in Berlin.", "d"))
    e.queue.join()
    listed = e.entities.list(alice, None, "name", 100, 0)["entities"]
    assert {x["name"] for x in listed} >= {"Acme Corporation", "Jane Smith", "Lisbon"}
    ids = [x["id"] for x in listed]
    for x in listed:
        ids += [r["id"] for r in e.entities.relationships(alice, x["id"], "both", None)["relationships"]]
    assert len(ids) > len(listed)  # edges too: memory's (works_at, lives_in, sister) and the document's
    for i in ids:
        assert not any(n in i.lower() for n in NAMES), i
        assert i.startswith(("ent_", "rel_", "grel:ent_")), i
    jane = e.entities.query(alice, "jane smith", None)["entity"]
    assert jane["id"] == eid(e, "Person", "Jane Smith") and jane["mention_count"] == 2


def test_the_key_is_the_contexts_own_and_made_once_whoever_races(both: Engram) -> None:
    e = both
    makers = [OpaqueIds(e.records, e.clock) for _ in range(8)]  # as many processes, each with its own cache
    made: list[str] = []
    assert together(8, lambda i: made.append(makers[i].entity("fresh", "Person", "Jane Smith"))) == []
    assert len(set(made)) == 1  # one key: every process gives the name one id
    assert e.ids.entity("fresh", "Person", "jane smith") == made[0]  # case aside, as lookups compare
    assert e.ids.entity("other", "Person", "Jane Smith") != made[0]  # another context: another key
    assert len(e.records.history("fresh", "idkey", "ids")) == 1


def test_writers_racing_on_one_new_name_make_one_entity(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    stored = together(
        6, lambda i: e.memory.store(alice, Turn(f"My colleague is Quentin Marsh, about case {i}."), [[ALICE]])
    )
    assert stored == []
    e.queue.join()
    found = [x for x in e.entities.list(alice, None, "name", 100, 0)["entities"] if x["name"] == "Quentin Marsh"]
    assert [(x["id"], x["mention_count"]) for x in found] == [(eid(e, "Person", "Quentin Marsh"), 6)]


def test_an_entity_kept_under_its_old_id_still_resolves_and_takes_new_mentions(both: Engram) -> None:
    """An entity as Engram wrote it before ids were opaque: `Person:jane smith`, its lookup entry without a type."""
    e = both
    alice, _ = two_agents(e)
    old = "Person:jane smith"
    data = {"type": "Person", "name": "Jane Smith", "aliases": [], "description": "", "metadata": {},
            "mentions": {ALICE: 1}, "first": {ALICE: "2026-01-01T00:00:00+00:00"},
            "created_at": "2026-01-01T00:00:00+00:00", "scopes": [ALICE]}  # fmt: skip
    e.records.transact(
        [Write("acme", "entity", old, data, "t", 0),
         Write("acme", "ealias", f"jane smith|{old}", {"entity": old, "alias": "Jane Smith"}, "t", 0)],
        e.clock.now(),
    )  # fmt: skip
    assert e.entities.query(alice, "Jane Smith", None)["entity"]["id"] == old
    e.memory.store(alice, Turn("My sister is Jane Smith."), [[ALICE]])  # memory's mention
    e.documents.ingest(alice, NewDocument(b"Jane Smith works at Acme Corporation.", "d"))  # the graph's
    e.queue.join()
    janes = [x for x in e.entities.list(alice, None, "name", 100, 0)["entities"] if x["name"] == "Jane Smith"]
    assert [(x["id"], x["mention_count"]) for x in janes] == [(old, 3)]  # no twin under the new id
    works = e.entities.relationships(alice, old, "both", None)["relationships"]
    assert sorted((r["direction"], r["type"], r["target"]["name"]) for r in works) == [
        ("incoming", "sister", "alice"), ("outgoing", "works_at", "Acme Corporation")]  # fmt: skip
    assert e.documents.node(alice, "Person", "jane_smith")["node"]["id"] == old  # Spectron's view


def test_an_old_form_id_of_a_new_entity_resolves_to_it(both: Engram) -> None:
    e = both
    alice, _ = two_agents(e)
    e.documents.ingest(alice, NewDocument(b"Jane Smith works at Acme Corporation.", "d"))
    e.queue.join()
    [r] = e.entities.relationships(alice, "Person:jane smith", "both", None)["relationships"]
    assert r["target"]["id"] == eid(e, "Organization", "Acme Corporation") and r["target"]["name"] == "Acme Corporation"
    updated = e.entities.update(alice, "Organization:acme corporation", None, "A client.", None)
    assert updated["entity_id"] == r["target"]["id"]
