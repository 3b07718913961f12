"""What the memory family's reads answer with: a hit as a dict, a prompt-ready context block."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engram.kernel.errors import InvalidInput
from engram.kernel.ports import (
    Hit,
)


def hit_dict(h: Hit) -> dict[str, Any]:
    meta = dict(h.metadata)
    return {
        "id": h.id,
        "kind": h.kind,
        "text": h.text,
        "score": round(h.score, 6),
        # what the score combines (docs/tools.md "Scores"): the share of the query's words, and the meaning
        "evidence": {"lexical": round(h.lexical, 6), "semantic": None if h.semantic is None else round(h.semantic, 6)},
        "said_at": meta.get("said_at"),
        "session_id": meta.get("session_id"),
        "metadata": meta,
    }


def format_context(hits: Sequence[Hit]) -> str:
    """A block ready for prompt injection: facts first, then what was said, each with its date. A text said
    again (the same words, whatever their case and spacing) is one line with each of its dates: the block is
    spent on what differs."""
    facts = [h for h in hits if h.kind == "attribute"]
    turns = [h for h in hits if h.kind != "attribute"]
    lines: list[str] = []
    if facts:
        lines.append("Known facts:")
        lines += [f"- {text} (since {', '.join(dates)})" for text, dates in _once(facts)]
    if turns:
        if lines:
            lines.append("")
        lines.append("Relevant conversation:")
        lines += [f"- [{', '.join(dates)}] {text}" for text, dates in _once(turns)]
    return "\n".join(lines)


def _once(hits: Sequence[Hit]) -> list[tuple[str, list[str]]]:
    """Each distinct text in the hits' order, with the distinct dates it was said on (in the hits' order)."""
    seen: dict[str, tuple[str, list[str]]] = {}
    for h in hits:
        dates = seen.setdefault(" ".join(h.text.lower().split()), (h.text, []))[1]
        date = str(h.metadata.get("said_at", ""))[:10]
        if date not in dates:
            dates.append(date)
    return list(seen.values())


def validate_query(query: str) -> str:
    if not query.strip():
        raise InvalidInput("query must not be empty")
    return query
