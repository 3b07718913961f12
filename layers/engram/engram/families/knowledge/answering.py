"""Answers grounded in retrieved passages, with citations.

With no language model: extractive. The sentences of the retrieved passages that share the most
question terms (weighted by the passage's rank) are the answer, each cited, none said twice. With a Generator the
model writes the answer from the numbered passages; citations are the passages it was given.
"""

from __future__ import annotations

from typing import Any

from engram.families.knowledge.chunking import sentences
from engram.kernel.ports import Generator
from engram.search.terms import query_terms

NO_ANSWER = "No indexed passage answers this question."
MAX_SENTENCES = 3


def _citation(n: int, r: dict[str, Any], quote: str) -> dict[str, Any]:
    c = r["chunk"]
    return {
        "n": n,
        "document_id": r["document_id"],
        "title": r["title"],
        "chunk_id": c["id"],
        "position": c["position"],
        "section": c["section"],
        "page": c["page"],
        "quote": quote,
    }


def answer(
    question: str,
    results: list[dict[str, Any]],
    generator: Generator | None,
    instructions: str | None = None,
    temperature: float = 0.0,
) -> dict[str, Any]:
    if not results:
        return {"answer": NO_ANSWER, "citations": [], "mode": "extractive"}
    if generator is not None:
        passages = "\n\n".join(f"[{i}] ({r['title']}) {r['chunk']['text']}" for i, r in enumerate(results, 1))
        system = "Answer only from the numbered passages and cite them as [n]. Say so when they do not answer."
        if instructions:
            system += " " + instructions
        text = generator.generate(system, f"Passages:\n{passages}\n\nQuestion: {question}", temperature=temperature)
        cites = [_citation(i, r, r["chunk"]["text"][:300]) for i, r in enumerate(results, 1) if f"[{i}]" in text]
        return {
            "answer": text,
            "citations": cites or [_citation(1, results[0], results[0]["chunk"]["text"][:300])],
            "mode": "generated",
        }
    terms = set(query_terms(question))
    scored: list[tuple[float, int, int, str]] = []
    for rank, r in enumerate(results):
        for j, sentence in enumerate(sentences(r["chunk"]["text"])):
            overlap = len(terms & set(query_terms(sentence)))
            if overlap:
                scored.append((overlap / (1 + 0.15 * rank), rank, j, sentence))
    if not scored:  # no shared words: the best passage is the answer
        top = results[0]
        quote = " ".join(sentences(top["chunk"]["text"])[:2])
        return {"answer": f"{quote} [1]", "citations": [_citation(1, top, quote)], "mode": "extractive"}
    best, said = [], set()
    for item in sorted(scored, key=lambda x: (-x[0], x[1], x[2])):
        same = " ".join(item[3].lower().split())  # a sentence the documents repeat is said once
        if same not in said:
            said.add(same)
            best.append(item)
        if len(best) == MAX_SENTENCES:
            break
    best.sort(key=lambda x: (x[1], x[2]))  # read in document order
    numbers: dict[int, int] = {}
    parts, citations = [], []
    for _, rank, _, sentence in best:
        if rank not in numbers:
            numbers[rank] = len(numbers) + 1
            citations.append(_citation(numbers[rank], results[rank], sentence))
        parts.append(f"{sentence} [{numbers[rank]}]")
    return {"answer": " ".join(parts), "citations": citations, "mode": "extractive"}
