"""Who and what a text names, and how they relate: rule-based, no model, no LLM (pure functions, no I/O).

Every text that enters Engram (conversation messages, document chunks, record payloads; memory turns have
their own first-person rules in `engram.families.memory.extraction`) is read sentence by sentence:

- **Names** are runs of capitalised words (with `of`, `de`, `&` ... inside: "Bank of America"), typed by
  what marks them: a title before a person ("Sen.", "President", "Dr."), a known first name, a company or
  institution word ("Inc.", "University", "Ministry", "Party"), an all-capital acronym, or a place in the
  gazetteer (`engram/data/places.txt`, GeoNames). A run nothing marks is not a name: a precise rule beats a
  loose one, since an agent acts on what is extracted.
- **Relations** between two names of one sentence come from what stands between them, a handful of exact
  patterns per type: works_at (person → organisation: "X, the chairman of Y", "Y chairman X", "X joined Y"),
  lives_in (person → place: "X of Y", "X lives in Y"), located_in (place → place: "Y, Z"), based_in
  (organisation → place: "Z-based Y", "Y of Z"), founded, manages / reports_to, member_of, family relations
  ("X's sister Y"), killed.

The rules were chosen on CoNLL04's training sentences and are measured on its dev sentences
(`make bench BENCH=conll04`, bench/RESULTS.md).
"""

from __future__ import annotations

import re
from typing import Any

from engram.families.entities.graph_names import (
    FAMILY,
    KNOWN,
    ORG,
    PERSON,
    PLACE,
    ROLES,
    TITLES,
    Fact,
    Name,
    join_words,
    names,
    regions,
    sentences,
    tokens,
)

__all__ = ["ORG", "PERSON", "PLACE", "Fact", "Name", "read", "read_with_llm", "relations", "sentences"]

# -- relations ------------------------------------------------------------------------------------------------

_R = ROLES
_A = (
    r"(?:(?:the|a|an|its|their|his|her|former|then|acting|deputy|vice|senior|chief|assistant|executive|general|"
    r"regional|national|local|top|[a-z\-]+ly|[A-Za-z\-]+(?:ian|ese|ish|al|ic|ive|ary)) )*"
)
_TRADE = r"(?:[a-z\-]+ ){0,2}[a-z\-]+(?:ist|ian|er|or)"
_WORK_MID = [  # person ... organisation
    re.compile(rf"^, {_A}{_R}(?: and {_A}{_R})?(?: [a-z\-]+){{0,3}} (?:of|at|for|with|in)(?: the)?$", re.I),
    re.compile(
        rf"^, (?:who|and) (?:is|was|has been|had been|became) {_A}{_R}(?: [a-z\-]+){{0,2}} (?:of|at|for|with)(?: the)?$"
    ),
    # a trade named by its ending: "X, a plant physiologist with the Y", "X, an ecologist and entomologist at Y"
    re.compile(rf"^, {_A}{_TRADE}(?: and {_A}{_TRADE})? (?:at|with|for)(?: the)?$"),
    re.compile(r"^(?:, \d+ ?, )?of(?: the)?$", re.I),  # "Jerry Chapman of the Bureau of Land Management"
    re.compile(
        r"^(?:, (?:who|and) |)(?:works?|worked|working|is employed|was employed|is|was) (?:at|for|with)(?: the)?$"
    ),
    re.compile(
        rf"^(?:, (?:who|and) )?(?:is|was|has been|had been|became|becomes|serves as|served as|works as|worked as) "
        rf"{_A}(?:[a-z\-]+ ){{0,2}}{_R}(?: and {_A}{_R})?(?: [a-z\-]+){{0,2}} (?:of|at|for|with)(?: the)?$"
    ),
    re.compile(r"^(?:, (?:who|and) )?(?:from|at)(?: the)?$", re.I),
    re.compile(r"^(?:, (?:who|and) |)(?:joined|heads|headed|runs|ran|leads|led|chairs|chaired)(?: the)?$", re.I),
    re.compile(rf"^, (?:the )?$|^, {_A}$", re.I),  # "X, the Y chairman" needs the role after: see _ORG_ROLE_AFTER
]
_ORG_ROLE_AFTER = re.compile(rf"^(?:'s )?{_A}{_R}", re.I)  # "..., Acme's chief executive" (the text after the org)
_ORG_PERSON_MID = re.compile(rf"^(?:'s )?{_A}{_R}$", re.I)  # "Edison spokesman Kevin Kelly"
_PERSON_PLACE_MID = [
    re.compile(r"^(?:, \d+ ?, )?(?:of|from)$"),
    re.compile(
        r"^(?:, )?(?:who |she |he |and )?(?:now |still |currently |also )?(?:lives?|lived|living|resides?|resided|"
        r"grew up|settled|is based|was based) in(?: the)?$"
    ),
    re.compile(r"^, (?:a|an)(?: [a-z0-9\-]+){1,3} from$"),  # "X, an electronics technician from North Wales"
    re.compile(r"^(?:, )?(?:who |she |he |and )?(?:has |have |had )?(?:just |recently )?(?:moved|relocated) to$"),
    re.compile(r"^, (?:a |an )?(?:[a-z\-]+ )?(?:native|resident|citizen) of$"),
]
_BORN_MID = re.compile(r"^(?:, )?(?:who )?(?:was )?born (?:[a-z]+ )?(?:in|near|at)$")
_PLACE_TITLE_PERSON = re.compile(
    r"^(?:'s )?(?:gov|governor|sen|senator|rep|representative|mayor|native|resident|citizen|congressman|"
    r"congresswoman|diplomat|ambassador|lawmaker|legislator)\.?$|^'s$",  # "Ohio's Richard Celeste"
    re.I,
)
_NATIVE_AFTER = re.compile(r"^(?:native|resident)\b")  # "X, a Memphis native"
_LOCATED_MID = re.compile(r"^(?:,|in(?: the)?|, in(?: the)?)$")
_BASED_MID = re.compile(
    r"^(?:, )?(?:(?:which|that) )?(?:(?:is|was|are|were) )?(?:based|headquartered|located) in(?: the)?$"
    r"|^(?:in|of)(?: the)?$"
    r"|^,$"
    r"|^, (?:a |an |the )?(?:[a-z\-]+ ){0,3}(?:company|firm|maker|group|bank|agency|startup|"
    r"retailer) (?:based )?in$"
)
_BASED_BEFORE = re.compile(r"^(?:- ?based|'s)$")
_FOUNDED = re.compile(
    r"^(?:, )?(?:who )?(?:founded|co-founded|started|set up|created|established)(?: the)?$"
    r"|^, (?:the )?(?:co-)?founder of(?: the)?$"
)
_FOUNDED_BY = re.compile(
    r"^(?:, )?(?:which |that )?(?:was )?(?:founded|co-founded|started|set up|created|established)(?: in \d{4})? by$"
)
_MEMBER = re.compile(r"^(?:, )?(?:who |and )?(?:is |was |became )?(?:a )?member of(?: the)?$")
_MANAGES = re.compile(r"^(?:, )?(?:who )?(?:manages|supervises|oversees)$")
_REPORTS = re.compile(r"^(?:, )?(?:who )?(?:reports|reported) to$")
_KILLED = re.compile(
    r"^(?:, )?(?:who )?(?:[a-z]+ ){0,3}(?:killed|assassinated|murdered|shot|stabbed|slew|strangled|"
    r"executed|killing|murdering|assassinating|shooting)(?: and (?:mortally |fatally )?(?:wounded|killed))?$"
    r"|^, (?:the )?(?:accused |convicted )?(?:assassin|killer|murderer) of$"
    # "pleaded guilty to killing rock star X", "has admitted murdering son-in-law X"
    r"|^(?:, )?(?:who )?(?:has |had )?(?:pleaded guilty to|admitted|admits|was convicted of|is accused of|"
    r"was accused of|confessed to) (?:killing|murdering|assassinating)(?: [a-z\-]+){0,2}$"
)
_KILLED_BY = re.compile(
    r"^(?:, )?(?:who )?(?:was |were )?(?:fatally |mortally )?(?:killed|assassinated|murdered|shot|slain|"
    r"stabbed)(?: [a-z]+){0,3} by(?: [a-z]+){0,2}$"
    r"|^(?:'s )?(?:assassin|killer|murderer),?$"
)
_FAMILY = re.compile(r"^'s (" + "|".join(FAMILY) + r"),?$|^, (?:the |his |her )?(" + "|".join(FAMILY) + r") of$")


def relations(sentence: str) -> tuple[list[Name], list[Fact]]:
    """The names of one sentence and the relations it states between them."""
    toks = tokens(sentence)
    found = names(toks)
    facts: list[Fact] = []
    for a_i, a in enumerate(found):
        for b in found[a_i + 1 : a_i + 4]:  # the next names only: relations are stated close together
            mid = join_words(toks[a.end : b.start]) if b.start > a.end else ""
            after = join_words(toks[b.end : b.end + 8])
            facts += _between(a, b, mid, after, sentence)
    return found, _unique(facts)


def _between(a: Name, b: Name, mid: str, after: str, sentence: str) -> list[Fact]:
    out: list[Fact] = []
    kinds = (a.type, b.type)
    listed = bool(re.match(r"^(?:,|and|or)\b", after)) or after.startswith(",")  # "A, B and C": a list

    def add(head: Name, rel: str, tail: Name) -> None:
        out.append(Fact(head, rel, tail, sentence))

    if kinds == (PERSON, ORG):
        if _FOUNDED.match(mid):
            add(a, "founded", b)
        elif _MEMBER.match(mid):
            add(a, "member_of", b)
        elif any(p.match(mid) for p in _WORK_MID[:-1]) or (_WORK_MID[-1].match(mid) and _ORG_ROLE_AFTER.match(after)):
            add(a, "works_at", b)
    elif kinds == (ORG, PERSON):
        if _FOUNDED_BY.match(mid) or re.match(r"^(?:'s )?(?:co-)?founder,?$", mid):
            add(b, "founded", a)
        elif re.match(r"^(?:has |have )?(?:hired|appointed|named|promoted)$", mid) or _ORG_PERSON_MID.match(
            mid
        ):  # "Acme hired Mary Lee"
            add(b, "works_at", a)
    elif kinds == (PERSON, PLACE):
        if _BORN_MID.match(mid):
            add(a, "born_in", b)
        elif any(p.match(mid) for p in _PERSON_PLACE_MID) or (mid in (", a", ", an") and _NATIVE_AFTER.match(after)):
            add(a, "lives_in", b)
    elif kinds == (PLACE, PERSON):
        if _PLACE_TITLE_PERSON.match(mid):
            add(b, "lives_in", a)
    elif kinds == (PLACE, PLACE):
        if _LOCATED_MID.match(mid) and not (mid == "," and listed and not _wider(a, b)):
            add(a, "located_in", b)
    elif kinds == (ORG, PLACE):
        if _BASED_MID.match(mid) and not (mid == "," and listed and not _wider(a, b)):
            add(a, "based_in", b)
    elif kinds == (PLACE, ORG):
        if _BASED_BEFORE.match(mid):
            add(b, "based_in", a)
    elif kinds == (PERSON, PERSON):
        mid = _untitled(mid)  # "X killed President Y": the title is the second person's
        if _KILLED.match(mid):
            add(a, "killed", b)
        elif _KILLED_BY.match(mid):
            add(b, "killed", a)
        elif _MANAGES.match(mid):
            add(a, "manages", b)
        elif _REPORTS.match(mid):
            add(a, "reports_to", b)
        elif fam := _FAMILY.match(mid):
            add(b, fam.group(1) or fam.group(2), a) if mid.startswith("'s") else add(a, fam.group(2), b)
    return out


def _untitled(mid: str) -> str:
    """What stands between two names without the titles that open the second ("Sen.", "President")."""
    words = mid.split(" ") if mid else []
    while words and words[-1].lower().rstrip(".") in TITLES - set(FAMILY):  # "'s sister": a relation, not a title
        words.pop()
    return " ".join(words)


def _wider(a: Name, b: Name) -> bool:
    """ "Riga, Latvia, in ...": a region after a comma is where the name before it is, not the next of a list
    ("Paris, London and Rome"; "Texas, Ohio and Utah" are regions both)."""
    return b.text.lower() in regions() and a.text.lower() not in regions()


def _unique(facts: list[Fact]) -> list[Fact]:
    seen: set[tuple[str, str, str]] = set()
    out = []
    for f in facts:
        key = (f.head.text.lower(), f.relation, f.tail.text.lower())
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def read(text: str) -> tuple[list[tuple[Name, str]], list[Fact]]:
    """Every name a text gives (with the sentence that gives it) and every relation it states. A name typed in
    one sentence types it in the others, and a person's surname alone is that person ("Jane Smith ... Smith
    said"): the text is read twice when it named anyone."""
    pieces = sentences(text)
    read_once = [relations(s) for s in pieces]
    known: dict[str, str] = {}
    for found, _ in read_once:
        for n in found:
            known.setdefault(n.text.lower(), n.type)
            if n.type == PERSON and " " in n.text:
                known.setdefault(n.text.split()[-1].lower(), PERSON)
    if known:
        token = KNOWN.set(known)
        try:
            read_once = [relations(s) for s in pieces]
        finally:
            KNOWN.reset(token)
    mentions = [(n, s) for s, (found, _) in zip(pieces, read_once, strict=True) for n in found]
    return mentions, [f for _, stated in read_once for f in stated]


RELATION_TYPES = ("works_at", "founded", "member_of", "manages", "reports_to", "lives_in", "born_in", "located_in",
                  "based_in", "killed", *FAMILY)  # fmt: skip
LLM_SYSTEM = (
    "Read the text and list who and what it names, and how they relate, only as it states. Answer only JSON: "
    '{"names": [{"name": "Jane Smith", "type": "Person|Organization|Location"}], "relations": [{"head": '
    '"Jane Smith", "type": "works_at", "tail": "Acme Corp"}]}. Relation types: ' + ", ".join(RELATION_TYPES) + "."
)


def read_with_llm(generate: Any, text: str) -> tuple[list[tuple[Name, str]], list[Fact]]:
    """`read`, by a language model (`generate(system, prompt) -> str`): its names and relations, each kept only
    when its text is in the source and its types are ones the rules know; a malformed answer falls back to the
    rules, so a bad answer never loses the source."""
    import json

    try:
        raw = generate(LLM_SYSTEM, text[:20_000])
        data = json.loads(raw[raw.index("{") : raw.rindex("}") + 1])
        found = {
            str(n["name"]): Name(0, 0, str(n["name"]), str(n["type"]))
            for n in data.get("names", [])
            if n.get("type") in (PERSON, ORG, PLACE) and str(n.get("name", "")).strip() and str(n["name"]) in text
        }
        mentions = [(n, next((s for s in sentences(text) if n.text in s), text[:240])) for n in found.values()]
        facts = [
            Fact(found[str(r["head"])], str(r["type"]), found[str(r["tail"])], "")
            for r in data.get("relations", [])
            if r.get("type") in RELATION_TYPES and str(r.get("head")) in found and str(r.get("tail")) in found
        ]
        return mentions, facts
    except (ValueError, KeyError, TypeError, AttributeError):
        return read(text)
