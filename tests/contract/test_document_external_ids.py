"""#50, Vectros' `document_ingest` idempotency as the seed says, on both adapter sets: one `externalId`, one
document, under any number of concurrent writers; the same content again is the existing document; other
content is `external_id_conflict` (as `record_create`), never a success that drops what was sent; a deleted
document's `externalId` may be used again."""

from __future__ import annotations

from typing import Any

import pytest

from engram.families.knowledge.documents import NewDocument
from engram.kernel.errors import Conflict
from engram.wiring import Engram
from tests.concurrency import together
from tests.contract.conftest import two_agents


def holders(e: Engram, who: Any, external_id: str) -> list[str]:
    return [d["id"] for d in e.documents.all_documents(who) if d.get("external_id") == external_id]


def test_ten_concurrent_ingests_with_other_texts_under_one_external_id_make_one_document(both: Engram) -> None:
    """Before: three documents with that externalId, and the others answered success with the old text."""
    e, (alice, _) = both, two_agents(both)
    answers: list[dict[str, Any]] = []
    errors = together(10, lambda i: answers.append(
        e.documents.ingest(alice, NewDocument(f"Report number {i}: all quiet.".encode(), f"r{i}", external_id="rep"))
    ))  # fmt: skip
    assert len(answers) == 1 and len(errors) == 9, (answers, errors)
    assert all(isinstance(x, Conflict) and x.code == "external_id_conflict" for x in errors), errors
    assert holders(e, alice, "rep") == [answers[0]["id"]] and answers[0]["deduplicated"] is False


def test_concurrent_retries_of_one_ingest_all_answer_the_one_document(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    answers: list[dict[str, Any]] = []
    errors = together(8, lambda i: answers.append(
        e.documents.ingest(alice, NewDocument(b"The pump room key is blue.", "keys", external_id="key-note"))
    ))  # fmt: skip
    assert errors == [] and len({a["id"] for a in answers}) == 1
    assert sorted(a["deduplicated"] for a in answers) == [False] + [True] * 7
    assert holders(e, alice, "key-note") == [answers[0]["id"]]


def test_other_content_is_a_conflict_and_a_deleted_documents_external_id_is_free_again(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    first = e.documents.ingest(alice, NewDocument(b"Version one of the memo.", "memo", external_id="memo"))
    with pytest.raises(Conflict) as refused:
        e.documents.ingest(alice, NewDocument(b"Version two of the memo.", "memo", external_id="memo"))
    assert refused.value.code == "external_id_conflict" and "memo" in str(refused.value)
    assert e.documents.get(alice, first["id"])["title"] == "memo" and holders(e, alice, "memo") == [first["id"]]
    e.documents.delete(alice, first["id"])
    again = e.documents.ingest(alice, NewDocument(b"Version two of the memo.", "memo", external_id="memo"))
    assert again["id"] != first["id"] and again["deduplicated"] is False
    assert holders(e, alice, "memo") == [again["id"]]
