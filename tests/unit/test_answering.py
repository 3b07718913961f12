"""Extractive answers: the best sentences, cited, in reading order, none twice."""

from __future__ import annotations

from typing import Any

from engram.families.knowledge.answering import MAX_SENTENCES, NO_ANSWER, answer


def _result(doc: str, n: int, text: str) -> dict[str, Any]:
    chunk = {"id": f"{doc}#{n:05d}", "text": text, "position": n, "section": "", "page": None}
    return {"document_id": doc, "title": doc.title(), "chunk": chunk}


def test_extractive_answer_cites_the_sentences_that_share_the_question_terms() -> None:
    results = [
        _result("manual", 0, "The boiler pressure should read 1.0 to 1.5 bar. The garden is large."),
        _result("notes", 3, "Low boiler pressure: top up with the filling loop."),
    ]
    out = answer("What should the boiler pressure be?", results, None)
    assert out["mode"] == "extractive" and "garden" not in out["answer"]
    assert out["answer"] == (
        "The boiler pressure should read 1.0 to 1.5 bar. [1] Low boiler pressure: top up with the filling loop. [2]"
    )
    assert [(c["n"], c["chunk_id"], c["position"]) for c in out["citations"]] == [
        (1, "manual#00000", 0),
        (2, "notes#00003", 3),
    ]


def test_a_sentence_the_documents_repeat_is_said_once() -> None:
    repeated = "The pressure gauge should read between 1.0 and 1.5 bar when cold."
    results = [
        _result("manual", 0, f"{repeated} {repeated} If the pressure drops, top up."),
        _result("copy", 0, repeated.upper()),
    ]
    out = answer("What should the pressure gauge read?", results, None)
    assert out["answer"].lower().count(repeated.lower()) == 1
    assert out["answer"].count("[") <= MAX_SENTENCES and "top up" in out["answer"]


def test_no_results_and_no_shared_words() -> None:
    assert answer("anything?", [], None) == {"answer": NO_ANSWER, "citations": [], "mode": "extractive"}
    out = answer("zebra?", [_result("manual", 2, "First sentence here. Second one. Third one.")], None)
    assert out["answer"] == "First sentence here. Second one. [1]" and out["citations"][0]["chunk_id"] == "manual#00002"
