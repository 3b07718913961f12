"""Issue #49, a shared object is a set of parts, each with its scope — on both adapter sets. An entity that Alice and
Bob both speak of is exported, erased (by scope or by id) and shown part by part: Bob's export holds none of Alice's
words, an erasure by id takes only the asker's part, what an erased subject wrote into it never stays under the
scopes that remain, and nobody is shown another scope's first-mention time. Each test failed on the code before."""

from __future__ import annotations

import json
import time
from typing import Any

from engram.families.memory.base import Turn
from engram.kernel.caller import ANY, Caller
from engram.kernel.clock import iso
from engram.wiring import Engram
from tests.contract.conftest import ALICE, BOB, eid, two_agents


def jane_id(e: Engram) -> str:
    return eid(e, "Person", "jane smith")


def manager_of(e: Engram, grant: str) -> Caller:
    _, principal = e.identity.create_key(["acme"], "management", [grant])
    return e.identity.enter(principal, "acme", ANY, "t")


def shared_jane(e: Engram) -> tuple[Caller, Caller]:
    alice, bob = two_agents(e)
    e.memory.store(alice, Turn("My sister is Jane Smith, she hides the key under the red pot."), [[ALICE]])
    e.memory.store(bob, Turn("My colleague is Jane Smith."), [[BOB]])
    e.queue.join()
    return alice, bob


def exported(e: Engram, admin: Caller, **subject: Any) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        page = e.subject_access.export(admin, e.erasure.subject(admin, **subject), cursor, 100)
        out += page["objects"]
        cursor = page["cursor"]
        if cursor is None:
            return out


def test_a_subjects_export_holds_only_its_parts_of_a_shared_entity(both: Engram) -> None:
    """`subject_export` of Bob returned entity records whole: Alice's sentences, her turn ids, earlier versions."""
    e = both
    alice, _ = shared_jane(e)
    alice_turns = [t["id"] for t in e.memory.recall(alice, "sister Jane", everything_when_small=False)["results"]]
    bobs = exported(e, manager_of(e, BOB), scope=BOB, external_id=None)
    jane = next(o for o in bobs if o["kind"] == "entity" and o["id"] == jane_id(e))
    text = json.dumps(jane)
    assert "sister" not in text and "red pot" not in text, text
    assert not any(t in text for t in alice_turns) and ALICE not in text
    assert "colleague" in text or jane["data"].get("mentions")  # his own part is there
    assert "earlier" not in jane and jane["data"]["scopes"] == [BOB]


def test_an_erasure_by_id_of_a_shared_entity_takes_the_askers_part_only(both: Engram) -> None:
    """Bob's manager erased, by id, an entity Alice and Bob both mention: it went whole, Alice's view with it."""
    e = both
    alice, _ = shared_jane(e)
    bobs_manager = manager_of(e, BOB)
    asked = e.erasure.request(bobs_manager, e.erasure.subject(bobs_manager, None, None, [jane_id(e)]), preview=False)
    e.erasure.run("acme", asked["request_id"])
    assert e.erasure.status(bobs_manager, asked["request_id"])["status"] == "done"
    kept = e.records.get("acme", "entity", jane_id(e))
    assert kept is not None and kept.data["scopes"] == [ALICE]
    seen = e.entities.query(alice, "Jane Smith", None)["entity"]
    assert seen["id"] == jane_id(e) and seen["mention_count"] == 1 and "sister" in seen["description"]
    assert "colleague" not in json.dumps(kept.data)
    edges = e.entities.relationships(alice, jane_id(e), "both", None)["relationships"]
    assert edges and all(r["target"]["id"] != "" for r in edges)  # Alice's edge still has both its ends


def test_what_an_erased_subject_wrote_into_a_shared_entity_does_not_stay_under_the_scopes_left(both: Engram) -> None:
    """Bob described Jane; Alice then spoke of her; Bob's erasure kept the entity under Alice's scope with Bob's
    description and metadata for her to read (and a reindex put them back in the index)."""
    e = both
    alice, bob = two_agents(e)
    e.memory.store(bob, Turn("My colleague is Jane Smith."), [[BOB]])
    e.queue.join()
    e.entities.update(bob, jane_id(e), None, "Bob's informant on project Nightjar", {"codename": "nightjar"})
    e.memory.store(alice, Turn("My sister is Jane Smith."), [[ALICE]])
    e.queue.join()
    admin = manager_of(e, "org/acme")
    asked = e.erasure.request(admin, e.erasure.subject(admin, BOB, None), preview=False)
    e.erasure.run("acme", asked["request_id"])
    kept = e.records.get("acme", "entity", jane_id(e))
    assert kept is not None and kept.data["scopes"] == [ALICE]
    assert "nightjar" not in json.dumps(kept.data).lower()
    seen = e.entities.query(alice, "Jane Smith", None)["entity"]
    assert "nightjar" not in json.dumps(seen).lower()
    found = e.entities.search(alice, "Nightjar informant", None, 10)["results"]
    assert all("nightjar" not in json.dumps(r).lower() for r in found)


def test_an_entity_shows_each_reader_its_own_first_mention_time(both: Engram) -> None:
    """An entity seen through another scope showed `created_at` of the first mention — Bob's private time."""
    e = both
    alice, bob = two_agents(e)
    e.memory.store(bob, Turn("My colleague is Jane Smith."), [[BOB]])
    e.queue.join()
    bobs_time = e.entities.query(bob, "Jane Smith", None)["entity"]["created_at"]
    time.sleep(1.1)
    before_alice = iso(e.clock.now())
    e.memory.store(alice, Turn("My sister is Jane Smith."), [[ALICE]])
    e.queue.join()
    hers = e.entities.query(alice, "Jane Smith", None)["entity"]["created_at"]
    assert hers is not None and hers >= str(before_alice) > str(bobs_time)
    assert e.entities.query(bob, "Jane Smith", None)["entity"]["created_at"] == bobs_time
    listed = e.entities.list(alice, None, "created_at", 50, 0)["entities"]
    assert jane_id(e) in [x["id"] for x in listed]
