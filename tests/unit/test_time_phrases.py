"""#53: the window a query's time phrase names, relative to the request's time and the caller's time zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram.kernel.errors import InvalidInput
from engram.search.time_phrases import read, zone

NOW = datetime(2026, 6, 17, 15, 30, tzinfo=UTC)  # a Wednesday


def window(
    query: str, tz: str = "UTC", events: dict[str, datetime] | None = None
) -> tuple[str, str | None, str | None]:
    z, name = zone(tz)
    rest, w = read(query, NOW, z, name, (events or {}).get)
    if w is None:
        return rest, None, None
    said = w.said()
    return rest, said["since"], said["until"]


@pytest.mark.parametrize(
    ("query", "rest", "since", "until"),
    [
        ("what did I say yesterday?", "what did I say?", "2026-06-16T00:00:00Z", "2026-06-17T00:00:00Z"),
        ("today's plans", "today's plans", "2026-06-17T00:00:00Z", "2026-06-18T00:00:00Z"),
        ("what happened last week", "what happened", "2026-06-08T00:00:00Z", "2026-06-15T00:00:00Z"),
        ("notes from this week", "notes from", "2026-06-15T00:00:00Z", "2026-06-22T00:00:00Z"),
        ("what did we decide two days ago", "what did we decide", "2026-06-15T00:00:00Z", "2026-06-16T00:00:00Z"),
        ("the trip in March", "the trip", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"),
        ("the trip in September", "the trip", "2025-09-01T00:00:00Z", "2025-10-01T00:00:00Z"),
        ("in March 2024 I said", "I said", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z"),
        ("what did I do last month", "what did I do", "2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z"),
        ("everything since March", "everything", "2026-03-01T00:00:00Z", None),
        ("everything before 2025", "everything", None, "2025-01-01T00:00:00Z"),
        # a date written out, either way round, its day read (not the month alone)
        ("what did John do the week before August 3, 2023", "what did John do the week", None, "2023-08-03T00:00:00Z"),
        (
            "what did Joanna finish on 23 January, 2022",
            "what did Joanna finish",
            "2022-01-23T00:00:00Z",
            "2022-01-24T00:00:00Z",
        ),
        ("plans for the Saturday after October 28, 2023", "plans for the Saturday", "2023-10-29T00:00:00Z", None),
        ("in the past 3 days", "in the past 3 days", "2026-06-14T15:30:00Z", None),
        ("calls on Monday", "calls", "2026-06-15T00:00:00Z", "2026-06-16T00:00:00Z"),
        ("calls last Wednesday", "calls", "2026-06-10T00:00:00Z", "2026-06-11T00:00:00Z"),
        ("a week ago", "a week ago", "2026-06-08T00:00:00Z", "2026-06-15T00:00:00Z"),
        ("the last week of October 2023", "the last week", "2023-10-01T00:00:00Z", "2023-11-01T00:00:00Z"),  # the date
        ("what I booked on 1st September 2023", "what I booked", "2023-09-01T00:00:00Z", "2023-09-02T00:00:00Z"),
        ("since 3 May 2024", "since 3 May 2024", "2024-05-03T00:00:00Z", None),
    ],
)
def test_phrases_name_windows(query: str, rest: str, since: str | None, until: str | None) -> None:
    got = window(query)
    assert got[1:] == (since, until)
    if rest != query:
        assert got[0] == rest


def test_the_callers_time_zone_moves_the_window() -> None:
    # 15:30 UTC is 00:30 the next day in Tokyo: "yesterday" there is the 17th, from 15:00 UTC the 16th
    assert window("yesterday", "Asia/Tokyo")[1:] == ("2026-06-16T15:00:00Z", "2026-06-17T15:00:00Z")
    with pytest.raises(InvalidInput):
        zone("Mars/Olympus")


def test_before_i_moved_reads_the_callers_own_memory() -> None:
    moved = NOW - timedelta(days=40)
    assert window("where did I live before I moved", events={"location": moved}) == (
        "where did I live", None, "2026-05-08T15:30:00Z")  # fmt: skip
    assert window("where did I live before I moved")[1] is None  # nothing remembered: the words stay
    assert window("the cafe since I moved", events={"location": moved})[1] == "2026-05-08T15:30:00Z"


def test_no_phrase_leaves_the_query_alone() -> None:
    for query in ("what is my favorite color", "I may go to Paris", "the march of progress", "monday.com pricing"):
        assert window(query) == (query, None, None)
