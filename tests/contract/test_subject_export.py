"""Subject access (`subject_export`), on both adapter sets: everything a subject owns, exactly what an erasure of it
would take and nothing of anyone else's, page by page in any page size, with a link to each file's bytes where
the blob store gives one; cursors it did not give are refused; a principal by externalId and objects by id."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from engram.families.knowledge.base import NewDocument
from engram.families.memory.base import Turn
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Forbidden, InvalidInput, NotFound
from engram.kernel.ports import Write
from engram.trust.erasure import owned_objects
from engram.wiring import Engram
from tests.contract.conftest import ALICE, BOB, two_agents
from tests.contract.test_erasure import management


def everything(e: Engram, admin: Caller, limit: int, **subject: Any) -> list[dict[str, Any]]:
    got, cursor, pages = [], None, 0
    while True:
        page = e.subject_access.export(admin, e.erasure.subject(admin, **subject), cursor, limit)
        assert len(page["objects"]) <= limit
        got += page["objects"]
        cursor, pages = page["cursor"], pages + 1
        if cursor is None:
            return got
        assert pages < 200


def fill(e: Engram) -> tuple[Caller, Caller, str]:
    alice, bob = two_agents(e)
    e.workctx.set(alice, "plan", {"step": 1, "note": "alice-plan"}, None, None)
    e.workctx.set(alice, "plan", {"step": 2, "note": "alice-plan"}, None, None)
    e.workctx.set(bob, "plan", {"step": 9}, None, None)
    for n in range(4):
        e.memory.store(alice, Turn(f"I keep {n + 2} tortoises in Porto."), [[ALICE]])
    e.memory.store(bob, Turn("I keep a parrot in Lyon."), [[BOB]])
    doc = e.documents.ingest(alice, NewDocument(b"The quokka manifest lists forty crates.", "manifest"))
    e.documents.ingest(bob, NewDocument(b"The wombat manifest lists ten crates.", "wombat"))
    e.conversation.append(alice, "alice-thread", "user", "My tortoise sleeps all day.", None)
    e.queue.join()
    return alice, bob, str(doc["id"])


def test_an_export_is_what_an_erasure_would_take_and_nothing_else(both: Engram) -> None:
    e = both
    _, _, doc = fill(e)
    admin = management(e)
    got = everything(e, admin, 500, scope=ALICE, external_id=None)
    names = sorted(f"{o['kind']}:{o['id']}" for o in got)
    families = [f.name for f in e.families()]
    assert names == owned_objects(e.records, e.kinds, "acme", e.erasure.subject(admin, ALICE, None), families)
    assert {o["kind"] for o in got} >= {"ctxkey", "turn", "document", "thread", "message"}
    assert all(ALICE in o["data"]["scopes"] for o in got)
    text = json.dumps(got)
    assert "alice-plan" in text and "tortoises" in text and "parrot" not in text and "wombat" not in text
    plan = next(o for o in got if o["kind"] == "ctxkey")
    assert plan["version"] == 2 and plan["data"]["value"]["step"] == 2 and plan["family"] == "context"
    assert [(v["version"], v["data"]["value"]["step"]) for v in plan["earlier"]] == [(1, 1)]  # what it said before
    assert plan["earlier"][0]["recorded_at"] and all("earlier" not in o for o in got if o["kind"] == "turn")
    [document] = [o for o in got if o["kind"] == "document"]
    assert document["id"] == doc and document["created_at"] and document["data"]["title"] == "manifest"
    if e.settings.backend == "aws":  # S3 gives a link to the file's bytes (the local folder gives none)
        assert httpx.get(document["download_url"]).content == b"The quokka manifest lists forty crates."
    else:
        assert "download_url" not in document


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_pages_of_any_size_give_every_object_once(both: Engram, limit: int) -> None:
    e = both
    fill(e)
    admin = management(e)
    whole = everything(e, admin, 500, scope=ALICE, external_id=None)
    paged = everything(e, admin, limit, scope=ALICE, external_id=None)
    assert [(o["kind"], o["id"]) for o in paged] == [(o["kind"], o["id"]) for o in whole]
    assert len({(o["kind"], o["id"]) for o in paged}) == len(paged) >= 8


def test_cursors_it_did_not_give_are_refused(both: Engram) -> None:
    e = both
    fill(e)
    admin = management(e)
    subject = e.erasure.subject(admin, ALICE, None)
    forged = [
        "not base64 at all!",
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(json.dumps({"k": "key", "a": None}).encode()).decode(),  # a system kind
        base64.urlsafe_b64encode(json.dumps({"k": "turn", "a": 5}).encode()).decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ]
    for cursor in forged:
        with pytest.raises(InvalidInput) as err:
            e.subject_access.export(admin, subject, cursor, 10)
        assert err.value.code == "invalid_cursor"


def test_a_principal_by_external_id_objects_by_id_and_the_grant(both: Engram) -> None:
    e = both
    _, _, doc = fill(e)
    admin = management(e)
    by_ids = everything(e, admin, 10, scope=None, external_id=None, ids=[doc])
    assert [(o["kind"], o["id"]) for o in by_ids] == [("document", doc)]
    with pytest.raises(NotFound):
        e.erasure.subject(admin, None, None, ["no-such-object"])
    with pytest.raises(Forbidden):  # outside the key's grant
        e.erasure.subject(admin, "org/globex/user/zed", None)
    narrow = e.identity.enter(e.identity.create_key(["acme"], "management", [BOB])[1], "acme", ANY, "t")
    with pytest.raises(Forbidden):
        e.erasure.subject(narrow, ALICE, None)


def test_an_object_that_changed_hands_keeps_its_earlier_owners_versions_out(both: Engram) -> None:
    """Earlier versions come with an object only where they were the subject's too; by id, the object is asked for
    whole (as an erasure by id takes every version)."""
    e = both
    fill(e)
    admin = management(e)
    first = Write("acme", "ctxkey", "handed", {"scopes": [BOB], "value": "bob-era"}, "t", 0)
    e.records.transact([first], e.clock.now())
    for n, scopes in enumerate(([ALICE], [ALICE, BOB])):
        e.records.transact([Write("acme", "ctxkey", "handed", {"scopes": scopes, "value": f"alice-{n}"}, "t", n + 1)],
                           e.clock.now())  # fmt: skip
    [handed] = [o for o in everything(e, admin, 500, scope=ALICE, external_id=None) if o["id"] == "handed"]
    assert handed["version"] == 3 and [v["data"]["value"] for v in handed["earlier"]] == ["alice-0"]
    [whole] = everything(e, admin, 10, scope=None, external_id=None, ids=["handed"])
    assert [v["data"]["value"] for v in whole["earlier"]] == ["alice-0", "bob-era"]  # newest first
    bobs = base64.urlsafe_b64encode(json.dumps({"k": "ctxkey", "a": "bobs", "v": 2}).encode()).decode()
    e.records.transact([Write("acme", "ctxkey", "bobs", {"scopes": [BOB], "value": "b"}, "t", 0)], e.clock.now())
    for forged in (bobs, base64.urlsafe_b64encode(json.dumps({"k": "ctxkey", "a": "handed", "v": "2"}).encode())):
        with pytest.raises(InvalidInput) as err:  # another's object, a version that is not a number
            e.subject_access.export(admin, e.erasure.subject(admin, ALICE, None), _text(forged), 10)
        assert err.value.code == "invalid_cursor"


def _text(cursor: str | bytes) -> str:
    return cursor.decode() if isinstance(cursor, bytes) else cursor


def test_a_long_history_goes_on_over_pages_and_each_page_stays_within_its_bytes(both: Engram) -> None:
    """An object with 3 MB of earlier versions: a page holds ~2 MB (a Lambda answer must hold it), the next opens
    with the object again, `continued`, and every version comes once."""
    e = both
    admin = management(e)
    two_agents(e)
    big = "x" * 100_000
    for n in range(31):
        e.records.transact([Write("acme", "ctxkey", "long", {"scopes": [ALICE], "value": f"{n}{big}"}, "t", n)],
                           e.clock.now())  # fmt: skip
    subject, cursor, seen, pages = e.erasure.subject(admin, ALICE, None), None, [], 0
    while True:
        page = e.subject_access.export(admin, subject, cursor, 500)
        assert len(json.dumps(page)) < 2_300_000
        for o in page["objects"]:
            if o["id"] == "long":
                assert o.get("continued", False) == (pages > 0) and (o.get("version") == 31) == (pages == 0)
                seen += [v["version"] for v in o["earlier"]]
        cursor, pages = page["cursor"], pages + 1
        if cursor is None:
            break
    assert pages >= 2 and seen == list(range(30, 0, -1)), (pages, seen)
