"""Schemas are data (issue #22, class 1 and 2), on both adapter sets: a schema cannot make Engram read a file,
fetch a URL, loop, backtrack or do unbounded work, and every refusal is a 400 that names where.

Each case here was reproduced on the code before the fix: a `file:` reference disclosed the file's content in a
`schema_violation` message, an `http:` one made a GET to a loopback listener, a missing target was a 500, and
`^(a+)+$` against 30 `a`s and a `!` took about a minute while every other request waited.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram.families.records.schema_rules import MAX_CHAIN_COST
from engram.families.records.schemas import MAX_PAYLOAD_BYTES
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import InvalidInput
from engram.wiring import Engram
from tests.fixtures.listener import loopback_listener

SECRET = "TOPSECRET-4815162342"


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A loopback listener that answers with a schema holding SECRET, and logs every request."""
    with loopback_listener(b'{"enum": ["' + SECRET.encode() + b'"]}') as found:
        yield found


def agent(e: Engram) -> Caller:
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    return e.identity.enter(p, "acme", ANY, "t")


def register(e: Engram, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return e.schemas.create("acme", "cli", name, "record", schema, [], "none", None, "")  # type: ignore[no-any-return]


def test_references_that_leave_the_schema_are_refused_and_nothing_is_fetched(
    both: Engram, tmp_path: Path, listener: tuple[str, list[str]]
) -> None:
    e = both
    url, seen = listener
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string", "enum": ["' + SECRET + '"]}')
    hostile = {
        "file": {"type": "object", "properties": {"a": {"$ref": secret.as_uri()}}},
        "http": {"type": "object", "properties": {"a": {"$ref": f"{url}/a.json"}}},
        "id-relative": {"$id": f"{url}/root.json", "type": "object", "properties": {"a": {"$ref": "other.json"}}},
        "dynamic": {"type": "object", "properties": {"a": {"$dynamicRef": f"{url}/d.json#meta"}}},
        "nested-id": {"type": "object", "properties": {"a": {"$id": f"{url}/x.json", "$ref": "#/nope"}}},
        "schema-uri": {"$schema": f"{url}/meta.json", "type": "object"},
        "in-defs": {"type": "object", "$defs": {"x": {"$ref": f"{url}/defs.json"}}, "properties": {}},
    }
    for name, schema in hostile.items():
        with pytest.raises(InvalidInput) as info:
            register(e, name, schema)
        assert info.value.status == 400, name
        assert SECRET not in info.value.message, name
    assert seen == []  # not one request reached the listener
    assert e.schemas.all("acme") == []  # and nothing was registered


def test_local_references_and_anchors_still_work(both: Engram) -> None:
    e = both
    schema = {
        "$id": "https://example.com/ticket.schema.json",  # a root $id is a name, never fetched
        "type": "object",
        "$defs": {"sku": {"$anchor": "sku", "type": "string", "pattern": "^[A-Z]{3}$"}, "node": {
            "type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "properties": {"a": {"$ref": "#/$defs/sku"}, "b": {"$ref": "#sku"}, "tree": {"$ref": "#/$defs/node"}},
    }  # fmt: skip
    register(e, "ticket", schema)
    caller = agent(e)
    made = e.typed.create(caller, "ticket", {"a": "ABC", "b": "XYZ", "tree": {"kids": [{"kids": []}]}}, None, None,
                          None, None)  # fmt: skip
    assert made["version"] == 1
    with pytest.raises(InvalidInput) as info:
        e.typed.create(caller, "ticket", {"a": "ABC", "b": "xyz"}, None, None, None, None)
    assert info.value.code == "schema_violation" and "payload.b" in info.value.message


def test_references_to_nothing_loops_and_blow_ups_are_refused_at_registration(both: Engram) -> None:
    e = both
    refused = {
        "missing": ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "points at nothing"),
        "anchor": ({"type": "object", "properties": {"a": {"$ref": "#nowhere"}}}, "points at nothing"),
        "loop": (
            {
                "type": "object",
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
            "loop",
        ),
        # each level doubles the subschemas one value meets: 2^32 along a 32-deep array
        "doubling": (
            {
                "type": "object",
                "$defs": {"n": {"allOf": [{"items": {"$ref": "#/$defs/n"}}, {"items": {"$ref": "#/$defs/n"}}]}},
                "properties": {"x": {"$ref": "#/$defs/n"}},
            },
            "too complex",
        ),
        # 30 x 100 subschemas for every item of an array
        "wide": (
            {
                "type": "object",
                "properties": {
                    "x": {"items": {"allOf": [{"anyOf": [{"minLength": i} for i in range(100)]} for _ in range(30)]}}
                },
            },
            "too complex",
        ),
        "backreference": ({"type": "object", "properties": {"a": {"pattern": "(a)\\1"}}}, "not a valid"),
        "lookaround": ({"type": "object", "patternProperties": {"^(?=x)": {}}}, "not a valid"),
        "meta": ({"type": "object", "properties": {"a": {"type": 5}}}, "not a valid JSON Schema"),
    }
    for name, (schema, says) in refused.items():
        with pytest.raises(InvalidInput, match=says) as info:
            register(e, name, schema)
        assert info.value.status == 400, name
    assert e.schemas.all("acme") == []
    # the bound is generous for real schemas: a tree type and an object of 200 properties are taken
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 10} for i in range(200)}}
    register(e, "wide-object", wide)
    assert MAX_CHAIN_COST >= 200


def test_catastrophic_patterns_run_in_linear_time(both: Engram) -> None:
    """`^(a+)+$` took about a minute for 30 characters under Python's backtracking engine; on a linear-time
    engine the largest payload allowed is checked at once. (A hang detector, not a benchmark: RESULTS has
    the figures.)"""
    e = both
    register(e, "evil", {"type": "object", "properties": {
        "a": {"type": "string", "pattern": "^(a+)+$"}, "b": {"type": "string", "pattern": "^(a|a)*$"},
        "list": {"type": "array", "items": {"type": "string", "pattern": "^(a|aa)+$"}}},
        "patternProperties": {"^(x+x+)+y$": {"type": "string"}}})  # fmt: skip
    caller = agent(e)
    started = time.perf_counter()
    for payload in (
        {"a": "a" * 30 + "!"},
        {"b": "a" * 40 + "!"},
        {"list": ["a" * 40 + "!"] * 100},
        {"a": "a" * (MAX_PAYLOAD_BYTES - 100) + "!"},
    ):
        with pytest.raises(InvalidInput) as info:
            e.typed.create(caller, "evil", payload, None, None, None, None)
        assert info.value.code == "schema_violation"
    # a key every backtracking engine chokes on, matched against the pattern property (no match: taken)
    assert e.typed.create(caller, "evil", {"x" * 40: "x", "a": "aaaa"}, None, None, None, None)["version"] == 1
    assert time.perf_counter() - started < 5  # minutes, before
