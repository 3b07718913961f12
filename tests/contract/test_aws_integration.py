"""The services over the AWS adapters (DynamoDB, S3, OpenSearch on the real engines), wired by
`engram.wiring.build` from settings, doing what a user does: store, supersede, recall, forget, upload."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.families.memory.base import Turn
from engram.families.memory.plan import session_key
from engram.kernel.caller import ANY
from engram.wiring import Engram
from tests.conftest import Aws
from tests.contract.conftest import aws_engram_on
from tests.fixtures.files import RETURNS_PDF, make_pdf

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]


@pytest.fixture
def aws_engram(aws: Aws, opensearch: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Engram:
    return aws_engram_on(aws, opensearch, monkeypatch, tmp_path)


def test_memory_and_documents_on_aws_adapters(aws_engram: Engram) -> None:
    e = aws_engram
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    e.memory.store(caller, Turn("I live in Lisbon and I work at Initech."), None)
    out = e.memory.store(caller, Turn("Actually, I moved to Porto."), None)
    assert out["attributes"][0]["action"] == "superseded"
    recall = e.memory.recall(caller, "where does the user live", k=1, kinds=("attribute",))
    assert recall["results"][0]["text"] == "user location: Porto"
    assert e.memory.forget(caller, "employer Initech", None)["deleted"] == 1
    assert [a["key"] for a in e.memory.profile(caller, None)["static"]] == ["location"]
    doc = e.documents.ingest(caller, NewDocument(make_pdf(RETURNS_PDF), "Returns", filename="returns.pdf"))
    e.queue.join()
    assert e.documents.get(caller, doc["id"])["status"] == "indexed"
    found = e.documents.search(caller, Search("return window for unopened items", k=1))["results"]
    assert found[0]["document_id"] == doc["id"] and found[0]["chunk"]["page"] == 2
    assert e.blobs.url(e.records.get("acme", "document", doc["id"]).data["blob_key"])  # type: ignore[union-attr]


def test_a_memory_batch_larger_than_one_dynamodb_transaction(aws_engram: Engram) -> None:
    e = aws_engram
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    turns = [Turn(f"I work at Company{i} and I live in City{i}.", session_id="big") for i in range(12)]
    turns.append(Turn("Actually, I moved to Porto.", session_id="big"))
    out = e.memory.store_many(caller, turns, None)  # ~5 writes a turn: more than DynamoDB's 50
    assert len(out) == 13 and len({o["turn_id"] for o in out}) == 13
    assert all(e.records.get("acme", "turn", o["turn_id"]) is not None for o in out)
    session = e.records.get("acme", "session", session_key("big", list(p.grant)))
    assert session is not None and session.data["turns"] == 13
    assert out[-1]["attributes"][0]["action"] == "superseded"  # later groups see the earlier ones
    assert [a["value"] for a in e.memory.profile(caller, None)["static"] if a["key"] == "location"] == ["Porto"]
