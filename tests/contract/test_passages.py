"""#50, passages as Spectron asks, on both adapter sets: `knowledge_search` answers `k` results whenever `k`
matching passages exist — distinct documents first (the ranking #25 measured), then further passages of the
same documents by their own scores — so a client with one long document gets its `k` passages."""

from __future__ import annotations

from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.wiring import Engram
from tests.contract.conftest import two_agents

HANDBOOK = "\n\n".join(
    f"Section {i}. The refund policy for region {i} says unopened items return within {10 + i} days." for i in range(8)
).encode()


def test_one_long_document_gives_its_k_passages(both: Engram) -> None:
    """Before: one result (the document's best chunk) for `k: 5`."""
    e, (alice, _) = both, two_agents(both)
    doc = e.documents.ingest(alice, NewDocument(HANDBOOK, "Handbook", strategy="paragraph", max_tokens=24, overlap=0))
    e.queue.join()
    assert e.documents.get(alice, doc["id"])["chunks"] >= 6
    found = e.documents.search(alice, Search("refund policy unopened items return", "bm25", 5))["results"]
    assert len(found) == 5 and len({r["chunk_id"] for r in found}) == 5
    assert {r["document_id"] for r in found} == {doc["id"]}
    assert all(isinstance(r["chunk"]["position"], int) for r in found)
    assert [r["score"] for r in found] == sorted((r["score"] for r in found), reverse=True)


def test_distinct_documents_come_first_then_further_passages(both: Engram) -> None:
    e, (alice, _) = both, two_agents(both)
    long = e.documents.ingest(alice, NewDocument(HANDBOOK, "Handbook", max_tokens=24, overlap=0))
    short = e.documents.ingest(alice, NewDocument(b"Our refund policy: unopened items return in 30 days.", "FAQ"))
    e.queue.join()
    found = e.documents.search(alice, Search("refund policy unopened items return", "bm25", 6))["results"]
    assert len(found) == 6 and {r["document_id"] for r in found[:2]} == {long["id"], short["id"]}
    assert all(r["document_id"] == long["id"] for r in found[2:])  # the FAQ has one passage: it was shown
    assert [r["score"] for r in found] == sorted((r["score"] for r in found), reverse=True)  # never rising
    paged = e.documents.search(alice, Search("refund policy unopened items return", "bm25", 3, offset=3))["results"]
    assert [r["chunk_id"] for r in paged] == [r["chunk_id"] for r in found[3:6]]  # pages follow the same order
    few = e.documents.search(alice, Search("refund policy unopened items return", "bm25", 50))["results"]
    assert len(few) == e.documents.get(alice, long["id"])["chunks"] + 1  # every matching passage, once
