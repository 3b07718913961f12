"""Time in plain language (#53): the window a query's time phrase names — "last week", "yesterday", "in March",
"two days ago", "since Monday", "before I moved" — read relative to the request's time in the caller's time zone.

`read(query, now, zone, events)` answers the query without its phrase (what search then looks for) and the window
[since, until) the phrase names, with the words it read, so a result can say how it understood them.

Hand-written, and why: the libraries that read dates in text (dateparser, parsedatetime, dateutil's fuzzy parser)
answer an instant ("last week" -> a day seven days ago), not the span a person means ("last week" -> Monday to
Monday of the week before this one), and none knows "before I moved", which names an event in the caller's own
memory. What is read is a small, closed grammar; anything else is left in the query untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engram.kernel.errors import InvalidInput
from engram.kernel.ports import Hit

MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]  # fmt: skip
SHORT = {m[:3]: i + 1 for i, m in enumerate(MONTHS)} | {"sept": 9}
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3, "couple of": 2,
           "few": 3}  # fmt: skip
UNITS = {"day": "day", "days": "day", "week": "week", "weeks": "week", "month": "month", "months": "month",
         "year": "year", "years": "year"}  # fmt: skip
# "before I moved" -> the fact whose change the verb names (memory's attribute keys)
EVENTS = {"moved": "location", "relocated": "location", "changed jobs": "employer", "switched jobs": "employer",
          "started my new job": "employer", "got a new job": "employer", "changed teams": "team"}  # fmt: skip

# A time read from a query's words is a preference (`preferred`): what was said in it, or up to LAG after it (people
# tell of a thing after it happened), ranks first — the others' scores are divided by 1 + BOOST, so scores stay in
# [0, 1] and fall down the list. Chosen on LoCoMo (bench/locomo_time.py, RESULTS).
BOOST = 1.0
LAG = timedelta(days=31)

Events = Callable[[str], datetime | None]  # attribute key -> when its current value began (the caller's memory)


@dataclass(frozen=True)
class Window:
    since: datetime | None
    until: datetime | None
    read: str  # the words the window was read from ("" when given as since / until)
    zone: str
    # read from the query's words alone: a preference (what was said in it, or soon after, ranks first: people
    # tell of a thing after it happened, and a question's "in 2021" is when it happened, not when it was said);
    # given as since / until: a filter
    soft: bool = False

    def said(self) -> dict[str, str | None]:
        """How the window was understood, for a result: its ends (ISO 8601, UTC), the words, the time zone."""
        return {"since": _iso(self.since), "until": _iso(self.until), "read": self.read or None, "timezone": self.zone,
                "as": "preference" if self.soft else "filter"}  # fmt: skip

    def bounds(self) -> tuple[str | None, str | None]:
        """The window as a search's inclusive range on an ISO 8601 time kept as text (said_at, created_at): to the
        microsecond, so text order is time order, and `until` excluded."""
        low = None if self.since is None else f"{self.since.astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}Z"
        high = (
            None
            if self.until is None
            else f"{(self.until - timedelta(microseconds=1)).astimezone(UTC):%Y-%m-%dT%H:%M:%S.%f}Z"
        )
        return low, high

    def narrowed(self, since: datetime | None, until: datetime | None) -> Window:
        """This window within [since, until) given explicitly (both hold)."""
        low = max((t for t in (self.since, since) if t is not None), default=None)
        high = min((t for t in (self.until, until) if t is not None), default=None)
        return Window(low, high, self.read, self.zone, soft=False)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def zone(name: str | None) -> tuple[tzinfo, str]:
    """The caller's time zone (IANA name; default UTC): an unknown one is the caller's error, said so."""
    if not name or name.upper() == "UTC":
        return UTC, "UTC"
    try:
        return ZoneInfo(name), name
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)",
                           details={"field": "timezone"}) from None  # fmt: skip


def _day(t: datetime) -> datetime:
    return t.replace(hour=0, minute=0, second=0, microsecond=0)


def _month(year: int, month: int, tz: tzinfo) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=tz)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=tz)
    return start, end


def _back(t: datetime, n: int, unit: str) -> datetime:
    if unit == "day":
        return t - timedelta(days=n)
    if unit == "week":
        return t - timedelta(weeks=n)
    months = t.year * 12 + t.month - 1 - (n if unit == "month" else 12 * n)
    year, month = divmod(months, 12)
    last = (_month(year, month + 1, t.tzinfo or UTC)[1] - timedelta(days=1)).day
    return t.replace(year=year, month=month + 1, day=min(t.day, last))


def _unit_span(t: datetime, unit: str) -> tuple[datetime, datetime]:
    """The calendar day / week (Monday first) / month / year holding `t`."""
    day = _day(t)
    if unit == "day":
        return day, day + timedelta(days=1)
    if unit == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(weeks=1)
    if unit == "month":
        return _month(day.year, day.month, day.tzinfo or UTC)
    return day.replace(month=1, day=1), day.replace(year=day.year + 1, month=1, day=1)


_NUM = r"(?P<n>\d{1,3}|" + "|".join(sorted(map(re.escape, NUMBERS), key=len, reverse=True)) + r")"
_UNIT = r"(?P<unit>" + "|".join(UNITS) + r")"
_MONTH = r"(?P<month>" + "|".join(MONTHS + sorted(SHORT, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<wd>" + "|".join(DAYS) + r")"
_EVENT = r"(?P<event>" + "|".join(sorted(map(re.escape, EVENTS), key=len, reverse=True)) + r")"
PATTERNS = [  # most specific first (a date that names its year before any phrase relative to now); whole words
    ("event", rf"(?P<rel>before|after|since) (?:i|we) {_EVENT}"),
    (
        "date",
        rf"(?:(?P<rel>since|before|after|in|during|of|on) )?(?:(?P<dom>\d{{1,2}})(?:st|nd|rd|th)? )?{_MONTH}"
        rf"(?: (?P<dom2>\d{{1,2}})(?:st|nd|rd|th)?)?,? (?P<year>(?:19|20)\d\d)",
    ),
    ("ago", rf"{_NUM} {_UNIT} ago"),
    ("past", rf"(?:in )?the (?:past|last) {_NUM} {_UNIT}"),
    ("past1", rf"(?:in )?the (?:past|last) {_UNIT}"),
    ("dby", r"the day before yesterday"),
    ("yesterday", r"yesterday"),
    ("today", r"today|this morning|this afternoon|this evening|tonight"),
    ("unit", rf"(?P<which>last|this|previous) {_UNIT}"),
    # a bare day or month name is too often something else ("the march of progress", "monday.com"): one is read
    # after a word that makes it a time (on, last, in, since...) or with its year
    ("weekday", rf"(?:(?P<rel>since|before|after) (?:(?P<last1>last) )?|(?P<last>last) |on ){_DAY}"),
    (
        "month",
        rf"(?:(?P<rel>since|before|after|in|during) (?:(?P<last1>last) )?|(?P<last>last) )?{_MONTH}"
        rf"(?: (?P<year>(?:19|20)\d\d))?",
    ),
    ("year", r"(?P<rel>since |before |after |in |during )(?P<year>(?:19|20)\d\d)"),
]
COMPILED = [(name, re.compile(rf"(?<![\w-])(?:{p})(?![\w-])", re.IGNORECASE)) for name, p in PATTERNS]


def read(
    query: str, now: datetime, tz: tzinfo, zone_name: str, events: Events | None = None
) -> tuple[str, Window | None]:
    """The query without its time phrase, and the window it names (None: no phrase here; the query as it was)."""
    local = now.astimezone(tz)
    for name, pattern in COMPILED:
        for found in pattern.finditer(query):
            span = _window(name, found, local, tz, events)
            if span is None:
                continue
            since, until = span
            rest = re.sub(r"\s{2,}", " ", (query[: found.start()] + query[found.end() :])).strip(" ,;")
            rest = re.sub(r"\s+([?.!,])", r"\1", rest)
            return rest or query, Window(since, until, found.group(0), zone_name, soft=True)
    return query, None


def window_of(
    query: str,
    now: datetime,
    timezone: str | None,
    since: datetime | None = None,
    until: datetime | None = None,
    events: Events | None = None,
    phrases: bool = True,
) -> tuple[str, Window | None]:
    """What a search looks for and when: the query without its time phrase, and the window it names narrowed by
    `since` / `until` given explicitly (None: no time at all). `timezone` (IANA) is the caller's. `phrases` off:
    the query's words are not read (only `since` / `until` make a window)."""
    tz, name = zone(timezone)
    rest, window = read(query, now, tz, name, events) if phrases else (query, None)
    if since is not None or until is not None:
        window = (window or Window(None, None, "", name)).narrowed(since, until)
    return rest, window


def _window(
    name: str, m: re.Match[str], now: datetime, tz: tzinfo, events: Events | None
) -> tuple[datetime | None, datetime | None] | None:
    g = {k: (v.lower().strip() if isinstance(v, str) else v) for k, v in m.groupdict().items()}
    if name == "event":
        at = events(EVENTS[g["event"]]) if events is not None else None
        if at is None:
            return None  # nothing remembered of it: the words stay in the query
        return (None, at) if g["rel"] == "before" else (at, None)
    if name in ("ago", "past", "past1"):
        n = 1 if name == "past1" else int(g["n"]) if g["n"].isdigit() else NUMBERS[g["n"]]
        unit = UNITS[g["unit"]]
        if name == "ago":  # the calendar unit that far back ("two days ago": that whole day)
            return _unit_span(_back(now, n, unit), unit)
        return _back(now, n, unit), None
    if name in ("dby", "yesterday", "today"):
        back = {"dby": 2, "yesterday": 1, "today": 0}[name]
        return _unit_span(now - timedelta(days=back), "day")
    if name == "unit":
        unit = UNITS[g["unit"]]
        start, end = _unit_span(now, unit)
        return (start, end) if g["which"] == "this" else _unit_span(_back(start, 1, unit), unit)
    if name == "weekday":
        back = (now.weekday() - DAYS.index(g["wd"])) % 7  # the latest such day (today's, if it is that day)
        if (g.get("last") or g.get("last1")) and back == 0:
            back = 7  # "last Monday" on a Monday: a week ago
        start, end = _unit_span(now - timedelta(days=back), "day")
        return _related(g.get("rel"), start, end)
    if name == "date":  # a month and year, or a day of it
        word = g["month"].rstrip(".")
        month = MONTHS.index(word) + 1 if word in MONTHS else SHORT[word[:4] if word == "sept" else word[:3]]
        start, end = _month(int(g["year"]), month, tz)
        dom = g.get("dom") or g.get("dom2")
        if dom and 1 <= int(dom) <= (end - start).days:
            start = start.replace(day=int(dom))
            end = start + timedelta(days=1)
        return _related(g.get("rel"), start, end)
    if name == "month":
        word = g["month"].rstrip(".")
        last = g.get("last") or g.get("last1")
        if not (g.get("rel") or last or g.get("year")):
            return None  # a bare month name
        if word == "may" and m.group("month")[0] == "m" and not g.get("year"):
            return None  # "since may", "in may": written lower-case, "may" is the verb ("in may be")
        month = MONTHS.index(word) + 1 if word in MONTHS else SHORT[word[:4] if word == "sept" else word[:3]]
        if g.get("year"):
            year = int(g["year"])
        else:  # the latest such month begun ("in March" in June: this March; in February, or "last March" in March:
            # last year's)
            latest = month < now.month if last else month <= now.month
            year = now.year if latest else now.year - 1
        start, end = _month(year, month, tz)
        return _related(g.get("rel"), start, end)
    if name == "year":
        start, end = datetime(int(g["year"]), 1, 1, tzinfo=tz), datetime(int(g["year"]) + 1, 1, 1, tzinfo=tz)
        return _related(g.get("rel"), start, end)
    return None


def _related(rel: str | None, start: datetime, end: datetime) -> tuple[datetime | None, datetime | None]:
    rel = (rel or "").strip()  # in, during, of, on: the span itself
    if rel == "since" or rel == "after":
        return (start if rel == "since" else end), None
    if rel == "before":
        return None, start
    return start, end


def said_in(h: Hit, window: Window, field: str) -> bool:
    """Whether a hit's time (`field` of its metadata, ISO 8601) lies in `window`, or up to LAG after it."""
    from engram.kernel.clock import parse_time

    said = parse_time(str(h.metadata.get(field) or "") or None)
    high = None if window.until is None else window.until + LAG
    return said is not None and (window.since is None or said >= window.since) and (high is None or said < high)


def preferred(hits: Sequence[Hit], window: Window, k: int, field: str) -> list[Hit]:
    """The best `k` of `hits`, those of the window first (`said_in`; the others' scores divided by 1 + BOOST)."""

    def score(h: Hit) -> float:
        return h.score if said_in(h, window, field) else h.score / (1 + BOOST)

    ranked = sorted(((score(h), n, h) for n, h in enumerate(hits)), key=lambda t: (-t[0], t[1]))
    return [h.scored(round(s, 6), h.lexical, h.semantic) for s, _, h in ranked[:k]]
