"""Typed records, schemas, lookups and version history (`engram.families.records.service`, `schemas`, `lookups`,
`history`) on both adapter sets: lookups are key ranges that follow every write, externalId idempotency
under concurrent creates, many concurrent updates, bad input that writes nothing, scopes, search."""

from __future__ import annotations

from typing import Any

import pytest

from engram.families.records.schemas import MAX_PAYLOAD_BYTES
from engram.families.records.service import KIND, LOOKUP
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Conflict, Forbidden, InvalidInput, NotFound
from engram.kernel.ports import SearchQuery
from engram.wiring import Engram
from tests.concurrency import together

ALICE, BOB = "org/acme/user/alice", "org/acme/user/bob"
ORDER = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
        "qty": {"type": "integer", "minimum": 0},
        "price": {"type": "number"},
        "lines": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}},
    },
    "required": ["sku", "qty"],
    "additionalProperties": False,
}
LOOKUPS = [{"field": "sku", "ops": ["exact", "prefix"]}, {"field": "qty", "ops": ["exact", "range"]},
           {"field": "price", "ops": ["range"]}]  # fmt: skip


def setup(e: Engram) -> tuple[Caller, Caller, Caller]:
    e.identity.register_scopes("acme", [ALICE, BOB])
    keys = [e.identity.create_key(["acme"], "agent", [g])[1] for g in (ALICE, BOB)]
    _, m = e.identity.create_key(["acme"], "management", ["org/acme"])
    alice, bob = (e.identity.enter(p, "acme", ANY, "t") for p in keys)
    e.schemas.create("acme", "cli", "order", "record", ORDER, LOOKUPS, "keyword", None, "")
    return alice, bob, e.identity.enter(m, "acme", ANY, "t")


def make(e: Engram, who: Caller, sku: str, qty: int, price: float = 1.0, **kw: Any) -> dict[str, Any]:
    return e.typed.create(who, "order", {"sku": sku, "qty": qty, "price": price}, kw.get("ext"), None, None, None)


def skus(page: dict[str, Any]) -> list[str]:
    return [r["payload"]["sku"] for r in page["items"]]


def test_lookups_exact_range_prefix_both_orders_and_pages(both: Engram) -> None:
    e, (alice, _, _) = both, setup(both)
    for i, (sku, qty, price) in enumerate([("ABC-1", 5, -2.5), ("ABC-2", 10, 0.0), ("ABD-3", 7, 3.25),
                                          ("XYZ-4", 10, 100.0), ("ABC-10", 1, 1e6)]):  # fmt: skip
        make(e, alice, sku, qty, price)
        assert i >= 0
    q = e.typed.query
    assert skus(q(alice, "order", "sku", "exact", "ABC-2", None, None, False, 10, None)) == ["ABC-2"]
    assert skus(q(alice, "order", "sku", "prefix", "ABC-", None, None, False, 10, None)) == ["ABC-1", "ABC-10", "ABC-2"]
    assert skus(q(alice, "order", "qty", "range", None, 5, 10, True, 10, None)) in (
        ["XYZ-4", "ABC-2", "ABD-3", "ABC-1"], ["ABC-2", "XYZ-4", "ABD-3", "ABC-1"]
    )  # fmt: skip
    # numbers sort as numbers, negatives and floats included
    assert skus(q(alice, "order", "price", "range", None, -3, 5, False, 10, None)) == ["ABC-1", "ABC-2", "ABD-3"]
    assert skus(q(alice, "order", "price", "range", None, 50, None, False, 10, None)) == ["XYZ-4", "ABC-10"]
    # a list by type, a page at a time, ascending then descending: every record once
    seen, token = [], None
    while True:
        page = q(alice, "order", None, "list", None, None, None, False, 2, token)
        seen += skus(page)
        token = page["nextPageToken"]
        if token is None:
            break
    assert len(seen) == 5 and len(set(seen)) == 5
    down = q(alice, "order", None, "list", None, None, None, True, 2, None)
    rest = q(alice, "order", None, "list", None, None, None, True, 10, down["nextPageToken"])
    assert skus(down) + skus(rest) == list(reversed(seen))
    with pytest.raises(InvalidInput, match="not a lookup field"):
        q(alice, "order", "lines", "exact", 1, None, None, False, 10, None)
    with pytest.raises(InvalidInput, match="takes range"):
        q(alice, "order", "price", "exact", 1, None, None, False, 10, None)
    with pytest.raises(InvalidInput, match="pageToken"):
        q(alice, "order", "sku", "prefix", "ABC", None, None, False, 10, "bm90LWEta2V5")
    with pytest.raises(NotFound):
        q(alice, "nosuchtype", None, "list", None, None, None, False, 10, None)


def test_updates_and_deletes_move_the_lookups_in_the_same_transaction(both: Engram) -> None:
    e, (alice, _, _) = both, setup(both)
    r = make(e, alice, "ABC-1", 5)
    e.typed.update(alice, r["id"], {"sku": "ABC-9", "qty": 5}, 1, None, None)
    q = e.typed.query
    assert skus(q(alice, "order", "sku", "exact", "ABC-1", None, None, False, 10, None)) == []
    assert skus(q(alice, "order", "sku", "exact", "ABC-9", None, None, False, 10, None)) == ["ABC-9"]
    entries = e.records.query("acme", LOOKUP).items
    assert sorted(i.id.split("\x1f")[1] for i in entries) == ["createdAt", "qty", "sku"]  # price: gone with it
    e.typed.delete(alice, r["id"], None)
    assert e.records.query("acme", LOOKUP).items == []  # no entry outlives its record
    with pytest.raises(NotFound):
        e.typed.get(alice, r["id"])
    history = e.history.versions(alice, r["id"], 10, None)
    assert [v["operation"] for v in history["versions"]] == ["delete", "update", "create"]
    assert {"op": "replace", "path": "/payload/sku", "value": "ABC-9"} in history["versions"][1]["diff"]
    assert history["versions"][0]["diff"] == [{"op": "replace", "path": "/deleted", "value": True}]


def test_bad_payloads_name_the_path_and_write_nothing(both: Engram) -> None:
    e, (alice, _, _) = both, setup(both)
    cases = [
        ({"sku": "abc", "qty": 1}, "payload.sku"),
        ({"sku": "ABC-1", "qty": -1}, "payload.qty"),
        ({"sku": "ABC-1"}, 'payload: "qty" is a required property'),
        ({"sku": "ABC-1", "qty": 1, "lines": [{"n": 1}, {"n": 0}]}, "payload.lines[1].n"),
        ({"sku": "ABC-1", "qty": 1, "extra": True}, "Additional properties"),
    ]
    for payload, where in cases:
        with pytest.raises(InvalidInput) as info:
            e.typed.create(alice, "order", payload, "ext-1", None, None, None)
        assert where in info.value.message and info.value.code == "schema_violation"
    big = {"sku": "ABC-1", "qty": 1, "lines": [{"n": 1}] * (MAX_PAYLOAD_BYTES // 6)}
    with pytest.raises(InvalidInput, match="limit"):
        e.typed.create(alice, "order", big, None, None, None, None)
    with pytest.raises(InvalidInput, match="control characters"):
        e.typed.create(alice, "order", {"sku": "ABC-1", "qty": 1}, "bad\x00id", None, None, None)
    with pytest.raises(NotFound, match="no schema"):
        e.typed.create(alice, "invoice", {"sku": "ABC-1", "qty": 1}, None, None, None, None)
    assert e.records.query("acme", KIND).items == [] and e.records.query("acme", LOOKUP).items == []
    r = make(e, alice, "ABC-1", 1)
    with pytest.raises(InvalidInput, match=r"payload\.qty"):
        e.typed.update(alice, r["id"], {"sku": "ABC-1", "qty": "one"}, None, None, None)
    assert e.typed.get(alice, r["id"])["version"] == 1
    with pytest.raises(Conflict):
        e.typed.update(alice, r["id"], {"sku": "ABC-1", "qty": 2}, 7, None, None)


def test_schemas_are_checked_when_registered(both: Engram) -> None:
    e = both
    create = e.schemas.create
    with pytest.raises(InvalidInput, match="not a valid JSON Schema"):
        create("acme", "cli", "x", "record", {"type": "object", "properties": {"a": {"type": 5}}}, [], "none", None, "")
    with pytest.raises(InvalidInput, match="lookup field 'b'"):
        create("acme", "cli", "x", "record", {"type": "object", "properties": {}}, [{"field": "b"}], "none", None, "")
    with pytest.raises(InvalidInput, match="prefix lookups take a string"):
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        create("acme", "cli", "x", "record", schema, [{"field": "n", "ops": ["prefix"]}], "none", None, "")
    with pytest.raises(InvalidInput, match="principalType"):
        create("acme", "cli", "x", "identity", {"type": "object"}, [], "none", None, "")
    with pytest.raises(InvalidInput, match="type must start"):
        create("acme", "cli", "../x", "record", {"type": "object"}, [], "none", None, "")
    assert e.schemas.all("acme") == []
    one = create("acme", "cli", "x", "record", {"type": "object"}, [], "none", None, "")
    two = create("acme", "cli", "x", "record", {"type": "object", "required": ["a"]}, [], "none", None, "")
    assert (one["version"], two["version"]) == (1, 2)
    with pytest.raises(InvalidInput, match="surface stays"):
        create("acme", "cli", "x", "document", {"type": "object"}, [], "none", None, "")


def test_concurrent_creates_with_one_external_id_make_one_record(both: Engram) -> None:
    e, (alice, _, _) = both, setup(both)
    ids: list[str] = []
    errors = together(16, lambda i: ids.append(make(e, alice, "ABC-1", 1, ext="order-1")["id"]))
    assert errors == [] and len(ids) == 16 and len(set(ids)) == 1
    assert len(e.typed.query(alice, "order", None, "list", None, None, None, False, 100, None)["items"]) == 1
    with pytest.raises(Conflict, match="another payload"):
        make(e, alice, "ABC-2", 1, ext="order-1")


def test_concurrent_updates_all_land_and_lookups_follow_the_last(both: Engram) -> None:
    e, (alice, _, _) = both, setup(both)
    r = make(e, alice, "ABC-0", 0)
    errors = together(12, lambda i: e.typed.update(alice, r["id"], {"sku": f"ABC-{i + 1}", "qty": i + 1}, None, None,
                                                   None))  # fmt: skip
    assert errors == []
    final = e.typed.get(alice, r["id"])
    assert final["version"] == 13 and len(e.history.versions(alice, r["id"], 100, None)["versions"]) == 13
    sku = final["payload"]["sku"]
    everyone = e.typed.query(alice, "order", "sku", "prefix", "ABC-", None, None, False, 100, None)
    assert skus(everyone) == [sku]  # exactly one lookup entry per field, the last write's
    assert len([i for i in e.records.query("acme", LOOKUP).items if "\x1fsku\x1f" in i.id]) == 1


def test_scopes_hide_records_lookups_history_and_externalids(both: Engram) -> None:
    e, (alice, bob, manager) = both, setup(both)
    r = make(e, bob, "ABC-1", 1, ext="shared-ext")
    for call in (
        lambda: e.typed.get(alice, r["id"]),
        lambda: e.typed.update(alice, r["id"], {"sku": "ABC-2", "qty": 1}, None, None, None),
        lambda: e.typed.delete(alice, r["id"], None),
        lambda: e.history.versions(alice, r["id"], 10, None),
    ):
        with pytest.raises(NotFound):
            call()
    assert e.typed.query(alice, "order", "sku", "exact", "ABC-1", None, None, False, 10, None)["items"] == []
    mine = make(e, alice, "ABC-1", 2, ext="shared-ext")  # another scope set: its own record, no conflict
    assert mine["id"] != r["id"]
    assert e.typed.get(manager, r["id"])["id"] == r["id"]  # the org's manager sees both
    with pytest.raises(Forbidden):
        e.typed.create(alice, "order", {"sku": "ABC-1", "qty": 1}, None, None, None, [[BOB]])


def test_index_mode_decides_what_search_finds(both: Engram) -> None:
    e, (alice, _, _) = both, setup(both)
    found = e.typed.create(alice, "order", {"sku": "ZEP-1", "qty": 3}, None, "keyword", {"team": "ops"}, None)
    hidden = e.typed.create(alice, "order", {"sku": "ZEP-2", "qty": 3}, None, "none", None, None)

    def hits(query: str) -> set[str]:
        lens = e.identity.read_lens(alice, None)
        q = SearchQuery("acme", query, None, "bm25", 10, ("record",), lens)
        return {h.id for h in e.index.search(q, e.clock.now())}

    assert found["id"] in hits("ZEP-1 order") and hidden["id"] not in hits("ZEP-2 order")
    e.typed.update(alice, hidden["id"], None, None, "keyword", None)
    e.typed.update(alice, found["id"], None, None, "none", None)
    assert hidden["id"] in hits("ZEP-2 order") and found["id"] not in hits("ZEP-1 order")
    e.typed.delete(alice, hidden["id"], None)
    assert hidden["id"] not in hits("ZEP-2 order")


def test_typed_documents_use_the_schemas_and_their_lookups_and_indexing_keeps_the_version(both: Engram) -> None:
    from engram.families.knowledge.documents import NewDocument

    e, (alice, _, _) = both, setup(both)
    invoice = {"type": "object", "properties": {"invoice": {"type": "string"}, "amount": {"type": "number"}},
               "required": ["invoice"]}  # fmt: skip
    lookups = [{"field": "invoice", "ops": ["exact", "prefix"]}, {"field": "amount", "ops": ["range"]}]
    e.schemas.create("acme", "cli", "invoice", "document", invoice, lookups, "none", None, "")

    def ingest(n: int, payload: dict[str, Any], schema: str = "invoice") -> dict[str, Any]:
        text = f"Invoice {n}: {n * 3} rivets for the wing panels.".encode()
        return e.documents.ingest(alice, NewDocument(text, f"Invoice {n}", schema_id=schema, payload=payload))

    with pytest.raises(InvalidInput, match=r"payload\.amount"):
        ingest(0, {"invoice": "INV-0", "amount": "ten"})
    with pytest.raises(InvalidInput, match="not a document type"):
        ingest(0, {"sku": "ABC-1", "qty": 1}, "order")
    docs = [ingest(n, {"invoice": f"INV-{n}", "amount": n * 10}) for n in (1, 2, 3)]
    items, _ = e.documents.lookup(alice, "invoice", "invoice", "prefix", "INV-", None, None, False, 10, None)
    assert [d["payload"]["invoice"] for d in items] == ["INV-1", "INV-2", "INV-3"]
    ranged, _ = e.documents.lookup(alice, "invoice", "amount", "range", None, 15, 30, True, 10, None)
    assert [d["payload"]["invoice"] for d in ranged] == ["INV-3", "INV-2"]
    e.queue.join()  # indexing finishes: the version a client was given still holds
    first = e.documents.get(alice, docs[0]["id"])
    assert first["version"] == docs[0]["version"] == 1 and first["status"] == "indexed"
    assert e.documents.update(alice, docs[0]["id"], {"title": "Invoice one"}, 1)["version"] == 2
    history = e.history.versions(alice, docs[0]["id"], 10, None)
    assert [v["operation"] for v in history["versions"]] == ["update", "create"]
    assert {"op": "replace", "path": "/title", "value": "Invoice one"} in history["versions"][0]["diff"]
    e.documents.delete(alice, docs[1]["id"])
    left, _ = e.documents.lookup(alice, "invoice", "invoice", "prefix", "INV-", None, None, False, 10, None)
    assert [d["payload"]["invoice"] for d in left] == ["INV-1", "INV-3"]


def test_a_schema_is_replaced_only_by_a_key_that_sees_every_object_of_its_type(both: Engram) -> None:
    """A manager of Alice's region may replace the `order` schema while every order is one it sees; once Bob has
    an order it does not see, it may not (409 `in_use`, naming nothing of his), and the schema stays; the
    context's manager may. Document types likewise, by the documents that name them."""
    from engram.families.knowledge.documents import NewDocument

    e, (alice, bob, admin) = both, setup(both)
    _, m = e.identity.create_key(["acme"], "management", [ALICE])
    region = e.identity.enter(m, "acme", ANY, "t")
    stricter = dict(ORDER, required=["sku", "qty", "price"])

    def replace(who: Caller, type_: str, schema: dict[str, Any], surface: Any = "record") -> dict[str, Any]:
        return e.schemas.create("acme", who.actor, type_, surface, schema, [], "keyword", None, "", who)

    make(e, alice, "ABC-1", 1)
    assert replace(region, "order", ORDER)["version"] == 2  # Alice's orders only: its own region's
    make(e, bob, "BOB-1", 1)
    with pytest.raises(Conflict) as refused:
        replace(region, "order", stricter)
    assert refused.value.code == "in_use" and "BOB" not in refused.value.message
    assert e.schemas.get("acme", "order").json_schema == ORDER and e.schemas.get("acme", "order").version == 2
    assert replace(admin, "order", stricter)["version"] == 3
    memo = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert replace(region, "memo", memo, "document")["version"] == 1  # a new type: any manager's
    e.documents.ingest(bob, NewDocument(b"Bob's memo.", "Memo", schema_id="memo", payload={"n": 1}))
    with pytest.raises(Conflict, match="in use"):
        replace(region, "memo", dict(memo, required=["n"]), "document")
