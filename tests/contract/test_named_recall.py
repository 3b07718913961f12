"""A recall whose question names a speaker searches the sessions that speaker speaks in first (#54,
`engram.families.memory.named`), on both adapter sets: the other speakers' turns in those sessions too, the rest of
the context after them when they hold fewer than k, and nothing of what the caller cannot see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram.families.memory import named
from engram.families.memory.base import Turn
from engram.families.memory.named import names_in
from engram.kernel.caller import Caller
from engram.wiring import Engram
from tests.contract.conftest import two_agents as callers

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def say(e: Engram, caller: Caller, session: str, *lines: tuple[str, str]) -> None:
    for n, (speaker, text) in enumerate(lines):
        turn = Turn(text, session_id=session, said_at=T0 + timedelta(minutes=n), metadata={"speaker": speaker})
        e.memory.store(caller, turn, None)


def recalled(e: Engram, caller: Caller, query: str, k: int) -> list[str]:
    got = e.memory.recall(caller, query, k=k, kinds=("turn",), everything_when_small=False)["results"]
    return [str(r["text"]) for r in got]


@pytest.fixture
def conversations(both: Engram) -> tuple[Engram, Caller, Caller]:
    alice, bob = callers(both)
    say(both, alice, "caro-1", ("Caroline", "I finally went to the painting class."),
        ("Melanie", "Was the class fun? Did the teacher like your work?"))  # fmt: skip
    say(both, alice, "dave-1", ("Dave", "The painting class at the painting studio was a great painting class."),
        ("Erin", "Painting class again? You love that class."),
        ("Dave", "The studio runs a painting class every week."))  # fmt: skip
    say(both, bob, "zed-1", ("Zed", "My painting class was cancelled."))
    return both, alice, bob


def test_a_named_speakers_sessions_come_first(conversations: tuple[Engram, Caller, Caller]) -> None:
    e, alice, _ = conversations
    question = "How did Caroline's painting class go?"
    got = recalled(e, alice, question, 2)
    assert len(got) == 2 and all("Dave" not in t and "Erin" not in t for t in got)
    assert any("Melanie" in t for t in got)  # the other speaker of her session: what she was told
    more = recalled(e, alice, question, 4)  # fewer than k in her sessions: the rest of the context after them
    assert more[:2] == got and len(more) == 4 and any("Dave" in t for t in more[2:])
    named.NARROW = False
    try:  # the same question, not narrowed: Dave's wordier turns outrank hers (what makes this test able to fail)
        plain = recalled(e, alice, question.rstrip("?"), 2)  # (another question to the recall cache)
    finally:
        named.NARROW = True
    assert any("Dave" in t for t in plain)


def test_a_speaker_the_caller_cannot_see_narrows_nothing(conversations: tuple[Engram, Caller, Caller]) -> None:
    e, alice, bob = conversations
    assert recalled(e, alice, "What did Zed say about the painting class?", 3) == recalled(
        e, alice, "What did Quinn say about the painting class?", 3
    )  # Zed speaks only in bob's scope: the same answer as for a name nobody has
    assert all("Zed" not in t for t in recalled(e, alice, "What did Zed say about the painting class?", 10))
    assert any("Zed" in t for t in recalled(e, bob, "What did Zed say about the painting class?", 1))


def test_names_in_a_question() -> None:
    forms = names_in("what did caroline's friend Mary Jane say?")
    assert {"caroline", "Caroline", "Mary Jane", "Mary", "Jane", "What"} <= set(forms)
    assert "s" not in forms and "caroline's" not in forms
    assert len(names_in(" ".join(f"w{n}x" for n in range(500)))) == named.NAMES  # bounded, however long
