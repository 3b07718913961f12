"""Deterministic extraction of facts from one conversational turn (no LLM).

Handles the common first-person forms: identity (name, age, role, employer, location, hometown),
relations ("my sister is Ana"), preferences ("I love hiking", "my favorite color is blue"),
current context ("I'm working on ..."), standing instructions ("always answer concisely"),
corrections ("actually, ...") and hedges ("I think I might ..."), which become uncertainties.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Category = Literal["identity", "knowledge", "context", "preference", "instruction", "experiential"]

# Keys that hold one value at a time: a new value supersedes the old one.
SINGLE_VALUED = {
    "name",
    "age",
    "role",
    "employer",
    "location",
    "hometown",
    "current_task",
    "email",
    "timezone",
    "language",
}


@dataclass
class Fact:
    key: str
    value: str
    category: Category
    correction: bool = False


@dataclass
class Relation:
    type: str
    target: str


@dataclass
class Instruction:
    label: str
    description: str


@dataclass
class Extraction:
    facts: list[Fact] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    uncertainties: list[str] = field(default_factory=list)
    mentions: list[tuple[str, str]] = field(default_factory=list)  # (entity type, name)


_END = r"(?=\s*(?:[.!?;,]|\band\b|\bbut\b|\bbecause\b|\bso\b|\bwhere\b|$))"
_VAL = r"(.+?)" + _END
_NAME = r"([A-Z][\w'\-]+(?:\s+(?!I\b)[A-Z][\w'\-]+)*)"
_ORG = r"([A-Z][\w&'.\-]*(?:\s+(?:(?:of|&|de|du|von)\s+)?(?!I\b)[A-Z][\w&'.\-]*)*)"

_CORRECTION = re.compile(r"^\s*(?:actually|correction|sorry|no|wait|i meant)\b[\s,:;-]*", re.I)
_HEDGE = re.compile(r"\b(?:i think|i guess|maybe|might|probably|not sure|perhaps|considering)\b", re.I)
_INSTRUCTION = re.compile(
    r"^\s*(?:please\s+)?(?:(?:from now on|going forward|in future|in the future)[\s,]+)?"
    r"(always|never|don't ever|do not ever|don't|do not|please|make sure to|remember to)\b\s*(.+)$",
    re.I,
)


def _p(lead: str, tail: str) -> re.Pattern[str]:
    """`lead` matches in any case; `tail` keeps its case (names and organisations are capitalised)."""
    return re.compile(r"\b(?i:" + lead + r")" + tail)


_TASK_VERBS = (
    r"(?:leading|running|preparing|writing|organi[sz]ing|managing|drafting|reviewing|building|designing|"
    r"coordinating|handling|developing|researching|studying|teaching|hosting|migrating|debugging|fixing|"
    r"launching|shipping|testing|planning (?:the|a|an|our|my))"
)

_PATTERNS: list[tuple[re.Pattern[str], str, Category]] = [
    (_p(r"my name is ", _NAME), "name", "identity"),
    (_p(r"(?:call me|i go by) ", _NAME), "name", "identity"),
    (_p(r"i(?:'m| am) (\d{1,3}) years? old", r"\b"), "age", "identity"),
    (_p(r"(?:promoted to|i(?:'ve| have)? became|i(?:'m| am) now(?: the| an?)?) ", _VAL), "role", "identity"),
    (_p(r"i work as (?:an? |the )?", _VAL), "role", "identity"),
    (_p(r"i(?:'m| am) (?:an?|the) ([a-z][\w\- ]+?) (?:at|for|with) ", _ORG), "role@employer", "identity"),
    (_p(r"i(?:'m| am) (?:an?|the) ([a-z][\w\- ]+?)", _END), "role", "identity"),
    (_p(r"i (?:work|am working|'m working) (?:at|for) ", _ORG), "employer", "identity"),
    (_p(r"i (?:just )?(?:joined|started at) ", _ORG), "employer", "identity"),
    (_p(r"i (?:live|am living|'m living|reside) in ", _ORG), "location", "identity"),
    (_p(r"i(?:'ve| have)? (?:just |recently )?(?:moved|relocated) to ", _ORG), "location", "identity"),
    (_p(r"i(?:'m| am) based in ", _ORG), "location", "identity"),
    (_p(r"i(?:'m| am) (?:originally )?from ", _ORG), "hometown", "identity"),
    (_p(r"my email is ", r"(\S+@\S+\w)"), "email", "identity"),
    (_p(r"my time ?zone is ", _VAL), "timezone", "identity"),
    (
        _p(r"i(?:'m| am) (?:currently )?(?:working on|focused on|focusing on|busy with) ", _VAL),
        "current_task",
        "context",
    ),
    (  # "I'm currently leading the Q3 roadmap review." (Spectron's example: current_task "Q3 roadmap review")
        _p(r"i(?:'m| am) (?:currently |now |right now )?" + _TASK_VERBS + " ", _VAL),
        "current_task",
        "context",
    ),
    (
        _p(r"i(?:'m| am) (?:currently|now|right now) (?!going |trying |thinking |feeling |planning to )\w+ing ", _VAL),
        "current_task",
        "context",
    ),
    (_p(r"i(?:'m| am) (?:planning|going|about) to ", _VAL), "plan", "context"),
    (_p(r"i (?:might|may|will|could) ", _VAL), "plan", "context"),
    (_p(r"my fav(?:ou?rite)? ([a-z][\w ]*?) (?:is|are) ", _VAL), "favorite_{0}", "preference"),
    (_p(r"i (?:really |absolutely )?(?:love|like|enjoy|adore) ", _VAL), "likes", "preference"),
    (_p(r"i (?:prefer|code in) ", _VAL), "prefers", "preference"),
    (_p(r"i (?:really )?(?:hate|dislike|can't stand|don't like|do not like) ", _VAL), "dislikes", "preference"),
]

_KIN = (
    r"(wife|husband|partner|sister|brother|mother|mom|father|dad|son|daughter|manager|boss|friend|"
    r"colleague|cofounder|co-founder|dog|cat)"
)
_RELATION = [
    _p(r"my ", _KIN + r" (?:is|'s) (?:called |named )?" + _NAME),
    re.compile(_NAME + r" (?i:is my) " + _KIN + r"\b"),
]

_LABELS = [
    (re.compile(r"\b(concise\w*|brief\w*|short\w*|verbose\w*|detail\w*|succinct\w*|terse\w*)\b", re.I), "length"),
    (re.compile(r"\b(formal|casual|friendly|polite|tone|direct)\b", re.I), "tone"),
    (re.compile(r"\b(english|french|german|spanish|italian|portuguese|japanese|chinese|language)\b", re.I), "language"),
    (re.compile(r"\b(bullet|markdown|json|table|format|code block|headings?)\b", re.I), "format"),
    (re.compile(r"\b(emoji|emojis)\b", re.I), "emoji"),
]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS_CAP = {"I", "The", "A", "An", "My", "We", "It", "This", "That", "But", "And", "So", "Yes", "No", "Hi", "Hey"}


def _clean(value: str) -> str:
    value = value.strip().strip("\"'").strip()
    value = re.sub(r"\s+", " ", value)
    value = re.sub(r"^(?:the|a|an|my)\s+", "", value, flags=re.I) if len(value.split()) > 1 else value
    return value.rstrip(".,;:!? ")


def _label(text: str) -> str:
    for pattern, label in _LABELS:
        if pattern.search(text):
            return label
    words = re.findall(r"[a-z]+", text.lower())[:3]
    return "_".join(words) or "general"


def extract(text: str) -> Extraction:
    out = Extraction()
    for raw in _SENTENCE.split(text.strip()):
        sentence = raw.strip()
        if not sentence:
            continue
        correction = bool(_CORRECTION.match(sentence))
        body = _CORRECTION.sub("", sentence) if correction else sentence
        m = _INSTRUCTION.match(body)
        if m and not body.lower().startswith(("please tell", "please let")) and "?" not in body:
            verb, rest = m.group(1).lower(), _clean(m.group(2))
            if rest:
                out.instructions.append(Instruction(_label(rest), f"{verb} {rest}" if verb != "please" else rest))
                continue
        hedged = bool(_HEDGE.search(body))
        for pattern in _RELATION:
            for rm in pattern.finditer(body):
                a, b = rm.group(1), rm.group(2)
                rel, name = (a.lower(), b) if a.islower() else (b.lower(), a)
                out.relations.append(Relation(rel, name))
                out.mentions.append(("Person" if rel not in ("dog", "cat") else "Pet", name))
        taken: set[str] = set()
        for pattern, key, category in _PATTERNS:
            for fm in pattern.finditer(body):
                if key == "role@employer":
                    pairs = [("role", fm.group(1)), ("employer", fm.group(2))]
                elif "{0}" in key:
                    pairs = [(key.format(re.sub(r"\W+", "_", fm.group(1).lower()).strip("_")), fm.group(2))]
                else:
                    pairs = [(key, fm.group(1))]
                for k, v in pairs:
                    value = _clean(v)
                    if not value or k in taken or len(value) > 120:
                        continue
                    if k == "name" and value.split()[0] in _STOPWORDS_CAP:
                        continue
                    if k == "role" and value.lower() in {"bit", "little", "lot", "fan", "big fan", "huge fan"}:
                        continue
                    taken.add(k)
                    if hedged:
                        out.uncertainties.append(f"{k}: {value} (hedged: {sentence})")
                        continue
                    out.facts.append(Fact(k, value, category, correction))
                    if k in ("employer",):
                        out.mentions.append(("Organization", value))
                    elif k in ("location", "hometown"):
                        out.mentions.append(("Location", value))
    return out
