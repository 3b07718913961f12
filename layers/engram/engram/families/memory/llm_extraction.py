"""Fact extraction with a language model (when one is configured), into the same shape as the rules.

The model answers JSON; anything it gets wrong falls back to the deterministic extractor, so a bad
answer never loses the turn.
"""

from __future__ import annotations

import json
from typing import Any

from engram.families.memory.extraction import Extraction, Fact, Instruction, Relation, extract
from engram.kernel.ports import Generator

SYSTEM = (
    "Extract durable facts the user states about themselves. Answer only JSON: "
    '{"facts": [{"key": "location", "value": "Berlin", "category": "identity|knowledge|context|preference", '
    '"correction": false}], "relations": [{"type": "sister", "target": "Ana"}], '
    '"instructions": [{"label": "length", "description": "always answer concisely"}], '
    '"uncertainties": ["..."]}. Use snake_case keys such as name, role, employer, location, likes.'
)
CATEGORIES = {"identity", "knowledge", "context", "preference"}


def extract_with_llm(generator: Generator, content: str) -> Extraction:
    raw = generator.generate(SYSTEM, content, max_tokens=600)
    try:
        start, end = raw.index("{"), raw.rindex("}") + 1
        data: dict[str, Any] = json.loads(raw[start:end])
        out = Extraction()
        for f in data.get("facts", []):
            category = f.get("category", "knowledge")
            out.facts.append(
                Fact(
                    str(f["key"]),
                    str(f["value"]),
                    category if category in CATEGORIES else "knowledge",
                    bool(f.get("correction", False)),
                )
            )
        out.relations = [Relation(str(r["type"]), str(r["target"])) for r in data.get("relations", [])]
        out.instructions = [Instruction(str(i["label"]), str(i["description"])) for i in data.get("instructions", [])]
        out.uncertainties = [str(u) for u in data.get("uncertainties", [])]
        return out
    except (ValueError, KeyError, TypeError, AttributeError):
        return extract(content)
