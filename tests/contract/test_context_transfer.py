"""#53: a whole context's export and import as a deployment's job (`context_export`, `context_import`,
`context_transfer_status`), on both adapter sets: only the context's manager starts one; an export made here is
imported into another context (its blobs moved under that context's keys, nothing shared with the first); a
hostile file fails its transfer with the reason, and writes nothing of another context; the operator's settings
of a context are not taken from a manager's file."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from engram.families.knowledge.base import NewDocument
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Forbidden, NotFound
from engram.kernel.ports import scan
from engram.wiring import Engram
from tests.contract.conftest import ALICE


def call(e: Engram, caller: Caller, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    out = e.call(caller, tool, arguments)  # as a client's call reaches the operation
    assert isinstance(out, dict)
    return out


def manager(e: Engram, ctx: str, grant: str) -> Caller:
    _, principal = e.identity.create_key([ctx], "management", [grant])
    return e.identity.enter(principal, ctx, ANY, "t")


def finished(e: Engram, caller: Caller, transfer_id: str) -> dict[str, Any]:
    e.queue.join()
    return call(e, caller, "context_transfer_status", {"transfer_id": transfer_id})


def test_a_context_moves_to_another_through_the_api(both: Engram) -> None:
    e = both
    e.identity.register_scopes("acme", [ALICE, "org/acme/user/bob"])
    e.identity.register_scopes("beta", ["org/beta/user/x"])
    acme, beta = manager(e, "acme", "org/acme"), manager(e, "beta", "org")
    call(e, acme, "memory_store", {"content": "I live in Paris.", "scopes": [[ALICE]]})
    e.documents.ingest(acme, NewDocument(b"The parcel arrived late.", "Notes", scopes=[[ALICE]]))
    started = call(e, acme, "context_export", {})
    assert started["status"] == "queued"
    done = finished(e, acme, started["transfer_id"])
    assert done["status"] == "done" and done["counts"]["objects"] > 5 and done["bytes"] > 0

    with pytest.raises(NotFound):  # another context's transfer is not there for this one
        call(e, beta, "context_import", {"transfer_id": started["transfer_id"]})
    key = next(i.data["blob"] for i in scan(e.records, "acme", "transfer"))
    raw = e.blobs.get(key)
    imported = call(e, beta, "context_import", {"bytes_base64": base64.b64encode(raw).decode()})
    done = finished(e, beta, imported["transfer_id"])
    assert done["status"] == "done" and done["counts"]["written"] > 5, done
    turns = [i.data["content"] for i in scan(e.records, "beta", "turn")]
    assert turns == ["I live in Paris."]
    docs = [i.data for i in scan(e.records, "beta", "document")]
    assert docs and all(d["blob_key"].startswith("beta/") for d in docs)  # its own copy of the bytes
    assert e.blobs.get(docs[0]["blob_key"]) == b"The parcel arrived late."
    again = call(e, beta, "context_import", {"bytes_base64": base64.b64encode(raw).decode()})
    assert finished(e, beta, again["transfer_id"])["counts"]["written"] == 0  # twice changes nothing


def test_only_the_context_manager_moves_it(both: Engram) -> None:
    e = both
    e.identity.register_scopes("acme", [ALICE, "org/acme/user/bob"])
    region = manager(e, "acme", ALICE)  # one user's region only
    for tool, args in (("context_export", {}), ("context_import", {"bytes_base64": "H4sIAAAAAAAA"}),
                       ("context_transfer_status", {"transfer_id": "tx_1"})):  # fmt: skip
        with pytest.raises(Forbidden):
            call(e, region, tool, args)


def hostile(lines: list[dict[str, Any]]) -> str:
    return base64.b64encode(gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in lines))).decode()


AT = "2025-01-01T00:00:00Z"
HEADER = {"t": "header", "format": "engram-export", "version": 1, "context": "evil", "model": None, "dim": None}


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ([HEADER, {"t": "blob", "key": "acme/doc:1/v1", "data": "aGk="}, {"t": "end", "objects": 0}], "outside"),
        ([HEADER, {"t": "object", "kind": "key", "id": "k", "created_at": "2025-01-01T00:00:00Z", "versions": []},
          {"t": "end", "objects": 1}], "holds no"),
        ([HEADER, {"t": "object", "kind": "turn", "id": "t", "created_at": "2025-01-01T00:00:00Z",
                   "versions": [{"v": "1", "data": {}, "actor": "x", "at": "2025-01-01T00:00:00Z"}]},
          {"t": "end", "objects": 1}], "line 2"),
        ([HEADER, {"t": "object", "kind": "turn"}, {"t": "end", "objects": 1}], "line 2"),
        ([HEADER], "incomplete"),
        ([{"t": "header", "format": "other"}], "not an Engram export"),
        ([HEADER, ["a", "list"], {"t": "end", "objects": 0}], "not a JSON object"),
        ([HEADER, {"t": "doc", "kind": "turn", "id": "t", "text": {"not": "text"}, "scopes": ["org/beta"]},
          {"t": "end", "objects": 0}], "line 2"),
        ([HEADER, {"t": "doc", "kind": "scope", "id": "t", "text": "x", "scopes": ["org/beta"]},
          {"t": "end", "objects": 0}], "line 2"),
        ([HEADER, {"t": "object", "kind": "turn", "id": "t", "created_at": AT,
                   "versions": [{"v": 1, "data": {"content": "no scopes"}, "actor": "x", "at": AT}]},
          {"t": "end", "objects": 1}], "line 2"),
        ([{**HEADER, "context": ""}, {"t": "end", "objects": 0}], "names no context"),
    ],
)  # fmt: skip
def test_a_hostile_file_fails_its_transfer_and_writes_nothing_elsewhere(
    both: Engram, lines: list[dict[str, Any]], why: str
) -> None:
    e = both
    e.identity.register_scopes("acme", [ALICE])
    e.identity.register_scopes("beta", ["org/beta/user/x"])
    acme, beta = manager(e, "acme", "org/acme"), manager(e, "beta", "org/beta")
    e.documents.ingest(acme, NewDocument(b"Acme's own bytes.", "Mine", scopes=[[ALICE]]))
    before = {i.data["blob_key"]: e.blobs.get(i.data["blob_key"]) for i in scan(e.records, "acme", "document")}
    started = call(e, beta, "context_import", {"bytes_base64": hostile(lines)})
    done = finished(e, beta, started["transfer_id"])
    assert done["status"] == "failed" and why in done["error"], done
    assert {k: e.blobs.get(k) for k in before} == before
    assert list(scan(e.records, "beta", "turn")) == []


def test_a_file_that_is_not_gzip_or_is_cut_short_fails_its_transfer(both: Engram) -> None:
    e = both
    e.identity.register_scopes("beta", ["org/beta/user/x"])
    beta = manager(e, "beta", "org/beta")
    whole = gzip.compress(b"".join(json.dumps(x).encode() + b"\n" for x in [HEADER, {"t": "end", "objects": 0}] * 50))
    for raw, why in ((whole[: len(whole) // 2], "cut short"), (b"\x1f\x8b" + b"not gzip at all", "not gzip")):
        started = call(e, beta, "context_import", {"bytes_base64": base64.b64encode(raw).decode()})
        done = finished(e, beta, started["transfer_id"])
        assert done["status"] == "failed" and why in done["error"], done


def test_a_managers_file_does_not_set_the_operators_settings(both: Engram) -> None:
    e = both
    e.identity.register_scopes("beta", ["org/beta/user/x"])
    beta = manager(e, "beta", "org/beta")
    at = "2025-01-01T00:00:00Z"
    lines = [
        {**HEADER, "context": "beta"},
        {"t": "object", "kind": "quota", "id": "context", "created_at": at,
         "versions": [{"v": 1, "data": {"writes_per_day": 10**9}, "actor": "x", "at": at}]},
        {"t": "end", "objects": 1},
    ]  # fmt: skip
    started = call(e, beta, "context_import", {"bytes_base64": hostile(lines)})
    done = finished(e, beta, started["transfer_id"])
    assert done["status"] == "done" and done["counts"]["skipped"] == {"quota": 1}
    assert e.records.get("beta", "quota", "context") is None
