"""Names in a text (the first half of `graph_rules`): sentences, tokens, and the runs of capitalised words that
name a person, an organisation or a place, typed by what marks them. Pure functions, no I/O."""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from importlib import resources

PERSON, ORG, PLACE = "Person", "Organization", "Location"

# -- the words that mark a name's type -------------------------------------------------------------------------

TITLES = {
    "mr", "mrs", "ms", "miss", "dr", "prof", "professor", "sen", "senator", "rep", "representative", "gov",
    "governor", "gen", "general", "president", "vice", "premier", "chancellor", "minister", "secretary", "judge",
    "justice", "rev", "reverend", "father", "sister", "brother", "pope", "king", "queen", "prince", "princess",
    "lord", "lady", "sir", "mayor", "lt", "col", "capt", "captain", "sgt", "sergeant", "adm", "admiral", "cmdr",
    "maj", "major", "officer", "detective", "ambassador", "chairman", "chief", "coach", "dame", "sheik",
    "ayatollah", "rabbi", "bishop", "cardinal", "archbishop", "emperor", "sultan", "colonel", "lieutenant",
}  # fmt: skip
SURNAME_TITLES = {"king", "major", "bishop", "cardinal", "pope", "prince", "lord", "judge", "chancellor"}
ORG_WORDS = {
    "inc", "corp", "co", "company", "corporation", "ltd", "llc", "plc", "gmbh", "ag", "sa", "group", "bank",
    "university", "college", "institute", "academy", "association", "party", "agency", "department", "ministry",
    "council", "committee", "commission", "union", "federation", "foundation", "times", "post", "news", "press",
    "journal", "tribune", "herald", "gazette", "airlines", "airways", "motors", "services", "bureau",
    "administration", "board", "court", "church", "army", "navy", "club", "network", "systems",
    "technologies", "laboratories", "labs", "hospital", "school", "authority", "organization", "organisation",
    "society", "league", "fund", "trust", "industries", "holdings", "partners", "associates", "senate",
    "congress", "parliament", "assembly", "cabinet", "police", "guard", "corps", "fbi", "cia", "nasa",
    "pentagon", "reuters", "xinhua", "tass", "itar-tass", "un", "nato", "opec", "kgb", "ira", "plo", "aclu",
    "studios", "records", "broadcasting", "television", "radio", "magazine", "airport", "railways", "exchange",
    "reserve", "nations", "center", "centre", "front", "movement", "office", "service",
}  # fmt: skip
ORG_HEADS = {"university", "bank", "department", "ministry", "institute", "college", "school", "board", "office",
             "bureau", "court", "council", "house", "museum", "church", "academy", "federation", "union"}  # fmt: skip
CONNECT = {"of", "de", "du", "la", "le", "van", "von", "der", "den", "del", "da", "di", "&", "bin", "al", "el"}
ROLES = (
    r"(?i:chairman|chairwoman|chair|president|vice president|chief executive|chief executive officer|ceo|cfo|coo|"
    r"cto|executive|director|managing director|manager|head|leader|founder|co-founder|owner|partner|spokesman|"
    r"spokeswoman|spokesperson|official|officer|employee|engineer|analyst|economist|scientist|researcher|"
    r"professor|lecturer|editor|reporter|correspondent|writer|columnist|lawyer|attorney|counsel|secretary|"
    r"treasurer|member|chancellor|minister|ambassador|commissioner|governor|senator|representative|adviser|"
    r"advisor|aide|consultant|architect|designer|developer|programmer|producer|general manager|superintendent|"
    r"administrator|coordinator|deputy|chief|boss|agent|commander|inspector|detective|correspondent|staffer)"
)
FAMILY = ("wife", "husband", "sister", "brother", "mother", "father", "son", "daughter", "cousin", "aunt", "uncle",
          "grandmother", "grandfather", "niece", "nephew", "spouse", "partner", "fiancee", "fiance")  # fmt: skip
FIRST_NAMES_FILE = "data/first_names.txt"
LEADING = {  # capitalised because they open a sentence or a clause, not names
    "the", "a", "an", "in", "on", "at", "by", "for", "from", "to", "with", "and", "but", "or", "as", "after",
    "before", "when", "while", "if", "he", "she", "it", "they", "we", "i", "you", "his", "her", "its", "their",
    "our", "my", "this", "that", "these", "those", "there", "here", "last", "next", "yesterday", "today",
    "tomorrow", "police", "officials", "authorities", "some", "many", "most", "all", "both", "one", "two",
    "three", "mr.", "during", "since", "until", "under", "over", "about", "according", "also", "however",
    "meanwhile", "then", "now", "so", "because", "although", "though", "where", "what", "who", "which", "why",
    "how", "among", "against", "despite", "earlier", "later", "each", "every", "no", "not", "other",
    "such", "another", "several", "few", "once", "twice", "only", "just", "still", "even", "former", "late",
}  # fmt: skip
ROLE_WORDS = {
    "ceo", "cto", "cfo", "coo", "cio", "ciso", "cmo", "vp", "svp", "evp", "chairman", "president", "director",
    "head", "founder", "chief", "manager", "member", "secretary", "minister", "spokesman", "spokeswoman",
}  # fmt: skip
AMBIGUOUS = {  # places that are also people's names: a place only where a place is expected
    "lincoln", "kennedy", "jackson", "washington", "houston", "austin", "charlotte", "madison", "jefferson",
    "franklin", "warren", "florence", "victoria", "eugene", "lawrence", "marion", "troy", "clinton", "columbus",
    "hamilton", "wellington", "raleigh", "carson", "taylor", "bush", "reagan", "johnson", "lee", "jordan",
    "georgia", "paris", "sydney", "chester", "dallas", "tyler", "irving", "santa", "lafayette",
    "henderson", "lewis", "scott", "grant", "allen", "arlington", "chandler", "douglas", "murray", "nelson",
}  # fmt: skip
MONTHS_DAYS = {"january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
               "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
               "dec", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}  # fmt: skip
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "mt", "jr", "sr", "inc", "corp", "co", "ltd", "gen", "sen", "rep",
                 "gov", "lt", "col", "capt", "sgt", "adm", "maj", "rev", "prof", "ft", "no", "vs", "bros"}  # fmt: skip

PLACE_WORDS = {
    "county", "parish", "province", "state", "valley", "island", "islands", "lake", "river", "mountain", "mountains",
    "bay", "sea", "ocean", "avenue", "street", "boulevard", "road", "square", "park", "peninsula", "desert", "canyon",
    "coast", "strait", "gulf", "harbor", "harbour", "beach", "heights", "hills", "falls", "springs", "city",
}  # fmt: skip
ORG_ABBREVIATIONS = {"inc", "corp", "co", "ltd", "bros"}
NOT_ORGS = {  # capitals that name no organisation: time zones, measures, things
    "gmt", "utc", "est", "edt", "cst", "cdt", "mst", "mdt", "pst", "pdt", "bst", "cet", "cest", "am", "pm", "gdp",
    "gnp", "cpi", "tv", "dvd", "cd", "pc", "aids", "hiv", "dna", "rna", "usd", "eur", "gbp", "jpy", "ok", "faq", "pdf",
    "url", "api", "sql", "html", "json", "xml", "csv", "usb", "gps", "ufo", "ceo", "mph", "kph", "rpm", "ph", "iq",
}  # fmt: skip
_TOKEN = re.compile(r"(?:[A-Z]\.){2,}|[A-Za-z0-9](?:[\w&'\-]*\w)?\.?|'s|[^\w\s]")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def _listed(name: str) -> frozenset[str]:
    text = resources.files("engram").joinpath(name).read_text()
    return frozenset(line.strip().lower() for line in text.splitlines() if line.strip() and not line.startswith("#"))


@cache
def places() -> frozenset[str]:
    return _listed("data/places.txt")


@cache
def regions() -> frozenset[str]:
    """Countries, US states (with their newswire short forms) and a few regions: what follows a town after a comma."""
    return _listed("data/regions.txt")


@cache
def first_names() -> frozenset[str]:
    return _listed(FIRST_NAMES_FILE)


@dataclass(frozen=True)
class Name:
    start: int  # token positions in the sentence: [start, end)
    end: int
    text: str
    type: str


@dataclass(frozen=True)
class Fact:
    """`head` `relation` `tail`, as one sentence says it."""

    head: Name
    relation: str
    tail: Name
    sentence: str


def sentences(text: str) -> list[str]:
    """The text's sentences (at . ! ? followed by a capital; abbreviations like "Mr." kept inside)."""
    out: list[str] = []
    for block in re.split(r"\n\s*\n|\n(?=[-*#\d])", text):
        for piece in _SENTENCE.split(block.strip()):
            piece = " ".join(piece.split())
            if out and _ends_with_abbreviation(out[-1]):
                out[-1] = f"{out[-1]} {piece}"
            elif piece:
                out.append(piece)
    return out


def _ends_with_abbreviation(sentence: str) -> bool:
    """A title or an initial ("Mr.", "J.") runs on into the next piece; a company's "Inc." may end a sentence."""
    last = sentence.rsplit(" ", 1)[-1].lower().rstrip(".")
    return last in ABBREVIATIONS - ORG_ABBREVIATIONS or (len(last) == 1 and last.isalpha())


def tokens(sentence: str) -> list[str]:
    out: list[str] = []
    for m in _TOKEN.finditer(sentence):
        tok = m.group(0)
        # a word's trailing period is the sentence's unless the word is an abbreviation or an initial
        if tok.endswith(".") and len(tok) > 1 and "." not in tok[:-1]:
            word = tok[:-1].lower()
            if word not in ABBREVIATIONS and len(word) > 1 and tok.lower() not in _PLACE_ABBREVIATIONS():
                out += [tok[:-1], "."]
                continue
        if tok.endswith("'s") and len(tok) > 2:
            out += [tok[:-2], "'s"]
            continue
        out.append(tok)
    return out


@cache
def _PLACE_ABBREVIATIONS() -> frozenset[str]:
    return frozenset(p for p in (line for line in places()) if p.endswith(".")) | {"calif.", "mass."}


def _cap(tok: str) -> bool:
    return tok[:1].isupper() and (tok[:1].isalpha())


def names(toks: list[str]) -> list[Name]:
    """The typed names of a tokenised sentence, in order."""
    out: list[Name] = []
    i = 0
    while i < len(toks):
        if toks[i].isupper() and len(toks[i]) > 6:  # a headline's capitals: names only if a place ("BRUSSELS,")
            j = i + 1
            while j < len(toks) and toks[j].isupper() and toks[j][:1].isalpha():
                j += 1
            text = join_words(toks[i:j])
            if text.lower() in places():
                out.append(Name(i, j, text.title(), PLACE))
            i = j
            continue
        if not _cap(toks[i]):
            i += 1
            continue
        j = i + 1
        while j < len(toks):
            if _cap(toks[j]):
                j += 1
            elif toks[j].lower() in CONNECT and j + 1 < len(toks) and _cap(toks[j + 1]):
                j += 2
            else:
                break
        out.extend(_segment(toks, i, j))
        i = j
    return out


def _word(tok: str) -> str:
    return tok.lower().rstrip(".")


def _segment(toks: list[str], start: int, end: int) -> list[Name]:
    """A run of capitalised words [start, end) as typed names: whole when something marks it, else split
    where a title, a connector, a place or a first name divides it ("Ohio Gov. Richard Celeste": a place and
    a person; "Jeffrey Laitman of New York": a person and a place)."""
    while start < end and (
        _word(toks[start]) in LEADING | MONTHS_DAYS
        or toks[start] in CONNECT
        or (_word(toks[start]) in ROLE_WORDS and start + 1 < end and toks[start + 1].lower() in CONNECT)
    ):
        start += 1
    while end > start and toks[end - 1].lower() in CONNECT:
        end -= 1
    if start >= end:
        return []
    named_first = _word(toks[start]) in first_names()
    for k in range(start, end):  # a title inside: what follows it is a person
        titled = _word(toks[k]) in TITLES or (k > start and _word(toks[k]) in ROLE_WORDS)
        if titled and k > start and named_first and _word(toks[k]) in SURNAME_TITLES and not toks[k].endswith("."):
            continue  # a name that opens with a first name holds a title that is a surname too ("Martin Luther King")
        named = _word(toks[end - 1]) in PLACE_WORDS | ORG_WORDS  # "King County", "Prince Edward Island"
        if titled and not named and k + 1 < end and _cap(toks[k + 1]) and toks[k + 1].lower() not in CONNECT:
            rest = end
            for c in range(k + 1, end):
                if toks[c].lower() in CONNECT:
                    rest = c
                    break
            person = (
                [Name(k + 1, rest, join_words(toks[k + 1 : rest]), PERSON)] if _personal(toks[k + 1 : rest]) else []
            )
            return _segment(toks, start, k) + person + (_segment(toks, rest + 1, end) if rest < end else [])
    whole = _whole(toks, start, end)
    if whole is not None:
        return [whole]
    for c in range(start + 1, end - 1):  # a connector: each side on its own ("Laitman of New York")
        if toks[c].lower() in CONNECT:
            left, right = _segment(toks, start, c), _segment(toks, c + 1, end)
            if left or right:
                return left + right
    for cut in range(end - 1, start, -1):  # a place at either end
        head, tail = join_words(toks[start:cut]), join_words(toks[cut:end])
        if head.lower() in places():
            return [Name(start, cut, head, PLACE), *_segment(toks, cut, end)]
        if tail.lower() in places() and tail.lower() not in AMBIGUOUS:
            return [*_segment(toks, start, cut), Name(cut, end, tail, PLACE)]
    for k in range(start + 1, end):  # a first name inside: a person from there ("Anatomist Jeffrey Laitman")
        if _word(toks[k]) in first_names() and k + 1 < end:
            return [*_segment(toks, start, k), Name(k, end, join_words(toks[k:end]), PERSON)]
    return []


def _personal(words: list[str]) -> bool:
    return bool(words) and len(words) <= 4 and all(w[:1].isupper() for w in words)


KNOWN: ContextVar[dict[str, str]] = ContextVar("names the text typed elsewhere", default={})  # noqa: B039


def _whole(toks: list[str], start: int, end: int) -> Name | None:
    """The run [start, end) as one name, when something marks its type (or the text typed it elsewhere)."""
    words = toks[start:end]
    text = join_words(words)
    elsewhere = KNOWN.get().get(text.lower())
    if elsewhere is not None and (elsewhere != PLACE or text.lower() not in AMBIGUOUS):
        return Name(start, end, text, elsewhere)
    low = [_word(w) for w in words]
    before = _word(toks[start - 1]) if start > 0 else ""
    after = " ".join(toks[end : end + 2]).lower()
    if len(words) >= 2 and low[-1] in PLACE_WORDS and low[0] not in ORG_HEADS:  # "King County", "Okhotsk Sea"
        return Name(start, end, text, PLACE)
    if text.lower() in places():
        if text.lower() not in AMBIGUOUS or before in ("in", "to", "from", "at", "near", "of") or after.startswith(","):
            return Name(start, end, text, PLACE)
        return Name(start, end, text, PERSON) if _said_after(toks, end) or before in TITLES else None
    if low[-1] in ORG_WORDS or (low[0] in ORG_HEADS and len(words) > 1) or any(w in ORG_WORDS for w in low[1:]):
        for c in range(start + 2, end - 1):  # "Federal Home Loan Bank of San Francisco": an organisation of a place
            if (
                toks[c].lower() == "of"
                and _word(toks[c - 1]) in ORG_WORDS
                and join_words(toks[c + 1 : end]).lower() in places()
            ):
                return None  # split at the connector by the caller: the organisation, then the place
        return Name(start, end, text, ORG)
    acronym = len(words) == 1 and words[0].isupper() and 2 <= len(words[0]) <= 6
    if (
        acronym
        and words[0].replace("-", "").isalpha()
        and low[0] not in ROLE_WORDS | NOT_ORGS
        and _acronym_acts(toks, start, end, before, after)
    ):  # an acronym that acts as an organisation: "the FBI", "NASA's", "IBM said", "works at IBM" (not CEO, CTO:
        # roles; not GMT, GDP; nor a technical term with nothing to say it is one: SAML, URI, ID)
        return Name(start, end, text, ORG)
    if before in TITLES or (low[0] in first_names() and len(words) >= 2):
        return Name(start, end, text, PERSON)
    if (
        len(words) <= 3
        and all(_namelike(w) or w.isupper() for w in words)
        and (_org_after(toks, end) or _org_before(toks, start))
    ):
        return Name(start, end, text, ORG)
    if len(words) <= 3 and all(_namelike(w) for w in words) and _said_after(toks, end):
        return Name(start, end, text, PERSON)
    if 2 <= len(words) <= 3 and all(_namelike(w) for w in words) and _occupation(before):
        return Name(start, end, text, PERSON)  # "anarchist Leon Czolgosz", "poet Emily Dickinson"
    return None


OCCUPATIONS = {
    "poet", "actor", "singer", "composer", "leader", "owner", "writer", "author", "painter", "player", "driver",
    "assassin", "killer", "suspect", "gunman", "farmer", "lawyer", "star", "legend", "pioneer", "automaker",
    "dissident", "resident", "student", "teacher", "doctor", "nurse", "worker", "soldier", "pilot", "banker",
    "coach", "dancer", "designer", "director", "producer", "photographer", "reporter", "sniper", "wife", "husband",
    "son", "daughter", "brother", "sister", "mother", "father", "widow", "man", "woman", "boy", "girl",
}  # fmt: skip


def _occupation(word: str) -> bool:
    """A lowercase word that names what a person is, right before a name."""
    return word.isalpha() and word.islower() and (word in OCCUPATIONS or word.endswith(("ist", "ess", "ian")))


_WHERE_ONE_WORKS = re.compile(
    r"(?:works?|worked|working|employed|a job|an internship) (?:at|for|by|with)$|(?:joined|hired by|acquired by|"
    r"left)$|(?:ceo|cto|cfo|coo|founder|co-founder|head|director|president|chairman|engineer|manager|employee|"
    r"intern|analyst|developer|designer|scientist|researcher|consultant|spokesman|spokeswoman) (?:of|at|with|for)$"
)


_ROLE_WORD = re.compile(rf"(?:{ROLES})s?")  # "IBM engineers", "KAL attorney"
_ACRONYM_ACTS = re.compile(
    r"(?:'s\b|(?:spokesman|spokeswoman|spokesperson|officials?|said|says|announced|reported|agents?|chief|director"
    r"|headquarters|president|chairman)\b)"
)


def _acronym_acts(toks: list[str], start: int, end: int, before: str, after: str) -> bool:
    """What says a lone acronym names an organisation: "the FBI", "NASA's", "IBM said", "GE spokesman", "works at
    IBM", a news agency after its city ("Paris AFP", "Houston (AP)"), a name's abbreviation ("... Microelectronica
    (CNM)"). A technical term has none of these (SAML, URI, a client ID)."""
    nxt = _word(toks[end]) if end < len(toks) else ""
    if before == "the" or _ACRONYM_ACTS.match(after) or nxt in ROLE_WORDS or _ROLE_WORD.fullmatch(nxt):
        return True
    if before == "(" and after.startswith(")") and start >= 2 and toks[start - 2][:1].isupper():
        return True
    if start > 0 and (toks[start - 1].lower() in places() or (start > 1 and join_words(toks[start - 2 : start]).lower()
                                                              in places())):  # fmt: skip
        return True
    return _org_before(toks, start) or _org_after(toks, end)


def _org_before(toks: list[str], start: int) -> bool:
    """Where an organisation is expected: "works at X", "joined X", "an engineer at X"."""
    return bool(_WHERE_ONE_WORKS.search(" ".join(toks[max(0, start - 3) : start]).lower()))


def _org_after(toks: list[str], end: int) -> bool:
    """What only an organisation does: "Initech was founded by", "..., which is headquartered in"."""
    nxt = " ".join(toks[end : end + 5]).lower()
    return bool(
        re.match(
            r"(?:, (?:which|that) )?(?:(?:was|is|has been) (?:founded|co-founded|incorporated|acquired by|listed on)|"
            r"(?:is |was )?headquartered)\b|(?:hired|acquired|employs|announced) ",
            nxt,
        )
    )


def _namelike(word: str) -> bool:
    return word[:1].isupper() and word[1:].islower() and word.isalpha() and len(word) > 1


def _said_after(toks: list[str], end: int) -> bool:
    """What only a person does: "X said", "X, 45,", "X works at", "X is the CTO of"."""
    nxt = " ".join(toks[end : end + 5]).lower()
    return bool(
        re.match(
            r"(?:, \d+ ,|said|says|told|, who|, a |, an |, the |was born|died|was killed|was elected|"
            r"was assassinated|was shot|was arrested|was convicted|works? (?:at|for)|worked (?:at|for)|lives in|"
            r"lived in|reports to|joined|founded|co-founded|manages|(?:is|was) (?:the|a|an) \S+ (?:of|at|for))",
            nxt,
        )
    )


def join_words(words: list[str]) -> str:
    return re.sub(r" (?=[,.'])|(?<=[-]) ", "", " ".join(words)).replace(" 's", "'s")
