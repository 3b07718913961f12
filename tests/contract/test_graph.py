"""One knowledge graph fed by every source (issue #23), on both adapter sets: conversation messages, documents
(ingest, update, delete) and searchable records give entities and typed relations; a job run twice counts
nothing twice; deleting or replacing a source takes its mentions and edges away; an entity nobody mentions any
more leaves lists and search unless a caller edited it; and every count, sentence, alias and source shown comes
from scope sets the caller may see."""

from __future__ import annotations

from typing import Any

import pytest

from engram.families.entities.graph import JOB
from engram.families.knowledge.documents import NewDocument
from engram.kernel.errors import NotFound
from engram.wiring import Engram
from tests.concurrency import together
from tests.contract.conftest import eid, two_agents


def names(e: Engram, who: Any) -> dict[str, int]:
    return {x["name"]: x["mention_count"] for x in e.entities.list(who, None, "name", 100, 0)["entities"]}


def edges(e: Engram, who: Any, eid: str) -> list[tuple[str, str, str]]:
    found = e.entities.relationships(who, eid, "both", None)["relationships"]
    return sorted((r["direction"], r["type"], r["target"]["name"]) for r in found)


def test_messages_documents_and_records_all_feed_one_graph(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    e.conversation.append(alice, "t1", "user", "I met Jane Smith today. Jane Smith works at Acme Corporation.", None)
    e.conversation.append(alice, "t1", "assistant", "Bob Jones is the CEO of Acme Corporation.", None)
    e.documents.ingest(alice, NewDocument(b"Acme Corp is headquartered in Boston. Jane Smith reports to Bob Jones.",
                                          "Org notes"))  # fmt: skip
    e.schemas.create("acme", "cli", "note", "record", {"type": "object"}, [], "keyword", None, "")
    e.typed.create(alice, "note", {"text": "Maria Garcia joined Initech in March."}, None, None, None, None)
    e.queue.join()
    assert names(e, alice) == {"Acme Corporation": 3, "Bob Jones": 2, "Boston": 1, "Initech": 1, "Jane Smith": 2,
                               "Maria Garcia": 1}  # fmt: skip
    acme = e.entities.query(alice, "Acme Corp", None)["entity"]  # another spelling leads to the same entity
    assert acme["id"] == eid(e, "Organization", "acme corporation") and acme["aliases"] == ["Acme Corp"]
    assert acme["description"] == "Jane Smith works at Acme Corporation."
    assert {s["kind"] for s in acme["sources"]} == {"message", "document"}
    assert edges(e, alice, "Person:jane smith") == [("outgoing", "reports_to", "Bob Jones"),
                                                     ("outgoing", "works_at", "Acme Corporation")]  # fmt: skip
    assert edges(e, alice, "Organization:acme corporation") == [
        ("incoming", "works_at", "Bob Jones"), ("incoming", "works_at", "Jane Smith"),
        ("outgoing", "based_in", "Boston")]  # fmt: skip
    [works] = [r for r in e.entities.relationships(alice, "Person:maria garcia", "both", None)["relationships"]]
    assert works["type"] == "works_at" and works["evidence"][0]["kind"] == "record"
    node = e.documents.node(alice, "Person", "jane smith")  # Spectron's view of the same graph
    assert sorted(x["type"] for x in node["edges"]) == ["reports_to", "works_at"] and node["node"]["mention_count"] == 2


def test_a_job_run_twice_counts_nothing_twice(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    doc = e.documents.ingest(alice, NewDocument(b"Jane Smith works at Acme Corporation.", "d"))
    e.queue.join()
    for _ in range(3):  # a worker that ran it, crashed before withdrawing it, and ran it again
        e.graph.extract("acme", f"document:{doc['id']}")
    assert names(e, alice) == {"Acme Corporation": 1, "Jane Smith": 1}
    [r] = e.entities.relationships(alice, "Person:jane smith", "both", None)["relationships"]
    assert r["type"] == "works_at" and len(r["evidence"]) == 1


def test_deleting_or_replacing_a_source_takes_its_names_and_edges_away(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    keep = e.documents.ingest(alice, NewDocument(b"Jane Smith works at Acme Corporation.", "keep"))
    gone = e.documents.ingest(alice, NewDocument(b"Zed Quill works at Acme Corporation.", "gone"))
    changed = e.documents.ingest(alice, NewDocument(b"Bob Jones lives in Denver.", "changed"))
    e.schemas.create("acme", "cli", "note", "record", {"type": "object"}, [], "keyword", None, "")
    rec = e.typed.create(alice, "note", {"text": "Maria Garcia works at Initech."}, None, None, None, None)
    e.queue.join()
    assert names(e, alice) == {"Acme Corporation": 2, "Bob Jones": 1, "Denver": 1, "Initech": 1, "Jane Smith": 1,
                               "Maria Garcia": 1, "Zed Quill": 1}  # fmt: skip
    e.documents.delete(alice, gone["id"])
    e.documents.update(alice, changed["id"], {"text": "Bob Jones lives in Austin, Texas."}, None)
    e.typed.delete(alice, rec["id"], None)
    e.queue.join()
    assert names(e, alice) == {"Acme Corporation": 1, "Austin": 1, "Bob Jones": 1, "Jane Smith": 1, "Texas": 1}
    assert edges(e, alice, "Person:bob jones") == [("outgoing", "lives_in", "Austin")]
    for dormant in ("Zed Quill", "Denver", "Maria Garcia"):
        with pytest.raises(NotFound):
            e.entities.query(alice, dormant, None)
        assert e.entities.search(alice, dormant, None, 10)["results"] == []
    assert edges(e, alice, "Organization:acme corporation") == [("incoming", "works_at", "Jane Smith")]
    # an entity a caller edited stays when nobody mentions it any more; one mentioned again comes back
    e.entities.update(alice, "Person:jane smith", None, "Our contact at Acme.", None)
    e.documents.delete(alice, keep["id"])
    e.documents.ingest(alice, NewDocument(b"Zed Quill lives in Denver.", "again"))
    e.queue.join()
    assert names(e, alice) == {"Austin": 1, "Bob Jones": 1, "Denver": 1, "Jane Smith": 0, "Texas": 1, "Zed Quill": 1}
    assert e.entities.query(alice, "Jane Smith", None)["entity"]["description"] == "Our contact at Acme."


def test_what_another_scope_set_said_stays_its_own(both: Engram) -> None:
    e, (alice, bob) = both, two_agents(both)
    e.documents.ingest(bob, NewDocument(b"Jane Smith works at Acme Corporation. Jane Smith lives in Oslo.", "bob"))
    e.conversation.append(alice, "a", "user", "Jane Smith, an engineer at Initech, called me.", None)
    e.queue.join()
    assert names(e, alice) == {"Initech": 1, "Jane Smith": 1}  # not Acme, not Oslo: Bob's document said those
    jane = e.entities.query(alice, "Jane Smith", None)["entity"]
    assert jane["mention_count"] == 1 and jane["description"] == "Jane Smith, an engineer at Initech, called me."
    assert [s["kind"] for s in jane["sources"]] == ["message"]
    assert edges(e, alice, "Person:jane smith") == [("outgoing", "works_at", "Initech")]
    assert edges(e, bob, "Person:jane smith") == [("outgoing", "lives_in", "Oslo"),
                                                   ("outgoing", "works_at", "Acme Corporation")]  # fmt: skip
    node = e.documents.node(alice, "Person", "jane smith")
    assert [x["type"] for x in node["edges"]] == ["works_at"] and "Oslo" not in str(node)
    with pytest.raises(NotFound):
        e.entities.query(alice, "Acme Corporation", None)


def test_many_writers_mentioning_one_entity_count_exactly(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    errors = together(
        12, lambda i: e.conversation.append(alice, f"t{i}", "user", "Jane Smith works at Acme Corp.", None)
    )
    assert errors == []
    assert e.queue.join(timeout=120)
    assert names(e, alice) == {"Acme Corp": 12, "Jane Smith": 12}
    [r] = e.entities.relationships(alice, "Person:jane smith", "both", None)["relationships"]
    assert len(r["evidence"]) == 10  # the last ten sources are kept and shown


def test_extraction_is_a_queued_job_after_the_commit(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    e.conversation.append(alice, "t", "user", "Jane Smith works at Acme Corporation.", None)
    assert names(e, alice) == {}  # not on the write's path: nothing yet (no worker runs in this engram)
    assert any(j.data.get("name") == JOB for j in e.queue.pending())  # committed with the message
    e.queue.join()
    assert names(e, alice) == {"Acme Corporation": 1, "Jane Smith": 1}
