"""Cortex's working context (`engram.families.context.service`) on both adapter sets: versions, TTL at read time,
runs, merge strategies, optimistic concurrency, many concurrent merges, bad input, scopes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from engram.families.context.service import MAX_VALUE_BYTES
from engram.kernel.errors import Conflict, InvalidInput, NotFound
from engram.wiring import Engram
from tests.concurrency import together
from tests.contract.conftest import ALICE, BOB  # noqa: F401
from tests.contract.conftest import two_agents as callers


def test_set_get_versions_history_and_list(both: Engram) -> None:
    w, (alice, _) = both.workctx, callers(both)
    first = w.set(alice, "config/debug", {"enabled": False}, None, None)
    assert first == {"key": "config/debug", "version": 1, "expires_at": None}
    assert w.set(alice, "config/debug", {"enabled": True, "level": "verbose"}, None, None)["version"] == 2
    got = w.get(alice, "config/debug", None)
    assert got["value"] == {"enabled": True, "level": "verbose"} and got["version"] == 2 and got["expires_at"] is None
    assert got["updated_at"].endswith("Z") or "+" in got["updated_at"]
    w.set(alice, "config/settings", {"a": 1}, 3600, None)
    w.set(alice, "other", "x", None, None)
    listed = w.keys(alice, "config/", None, 100)
    assert listed == {
        "keys": [
            {"key": "config/debug", "version": 2, "has_ttl": False},
            {"key": "config/settings", "version": 1, "has_ttl": True},
        ],
        "has_more": False,
    }
    assert w.keys(alice, "", None, 2)["has_more"] is True
    history = w.history(alice, "config/debug", None, 10)
    assert [v["version"] for v in history["versions"]] == [2, 1]  # newest first
    assert history["versions"][1]["value"] == {"enabled": False}
    assert len(w.history(alice, "config/debug", None, 1)["versions"]) == 1


def test_an_expired_key_is_gone_at_once_and_runs_are_separate(both: Engram) -> None:
    w, (alice, _) = both.workctx, callers(both)
    out = w.set(alice, "session/token", "abc", 60, None)
    assert out["expires_at"] is not None
    w.set(alice, "session/token", "in run 1", None, "run-1")
    assert w.get(alice, "session/token", "run-1")["value"] == "in run 1"  # the same key in a run is another key
    assert w.get(alice, "session/token", None)["value"] == "abc"
    later = both.clock.now() + timedelta(seconds=61)
    both.clock.now = lambda: later  # type: ignore[method-assign]
    with pytest.raises(NotFound):
        w.get(alice, "session/token", None)
    assert [k["key"] for k in w.keys(alice, "session/", None, 10)["keys"]] == []
    assert w.get(alice, "session/token", "run-1")["value"] == "in run 1"  # no TTL there
    again = w.set(alice, "session/token", "new", None, None)  # written over: the versions go on
    assert again["version"] == 2 and w.get(alice, "session/token", None)["value"] == "new"


def test_merge_strategies(both: Engram) -> None:
    w, (alice, _) = both.workctx, callers(both)
    w.set(alice, "s", {"ui": {"theme": "dark", "font": 12}, "lang": "en"}, None, None)
    deep = w.merge(alice, "s", {"ui": {"font": 14}, "new": 1}, "merge_deep", None)
    assert deep["merged_keys"] == ["new", "ui"] and deep["version"] == 2
    assert w.get(alice, "s", None)["value"] == {"ui": {"theme": "dark", "font": 14}, "lang": "en", "new": 1}
    w.merge(alice, "s", {"ui": {"font": 16}}, "merge_shallow", None)
    assert w.get(alice, "s", None)["value"]["ui"] == {"font": 16}  # shallow: the whole sub-object replaced
    w.merge(alice, "s", {"only": True}, "replace", None)
    assert w.get(alice, "s", None)["value"] == {"only": True}
    w.merge(alice, "log", {"step": 1}, "append", None)  # a new key: a one-element array
    w.merge(alice, "log", {"step": 2}, "append", None)
    assert w.get(alice, "log", None)["value"] == [{"step": 1}, {"step": 2}]
    # issue #23: appending a list to a list extends it (it appended the list as one element)
    w.merge(alice, "steps", ["start"], "append", None)
    w.merge(alice, "steps", ["step-1", "step-2"], "append", None)
    w.merge(alice, "steps", "step-3", "append", None)
    assert w.get(alice, "steps", None)["value"] == ["start", "step-1", "step-2", "step-3"]
    with pytest.raises(InvalidInput, match="array"):
        w.merge(alice, "s", {"x": 1}, "append", None)  # append on a non-array
    with pytest.raises(InvalidInput, match="object"):
        w.merge(alice, "log", {"x": 1}, "merge_deep", None)
    assert w.get(alice, "s", None)["version"] == 4  # refused merges wrote nothing


def test_expected_versions_and_bad_input_write_nothing(both: Engram) -> None:
    w, (alice, _) = both.workctx, callers(both)
    w.set(alice, "k", 1, None, None, expected_version=0)
    with pytest.raises(Conflict):
        w.set(alice, "k", 2, None, None, expected_version=0)  # exists already
    with pytest.raises(Conflict):
        w.merge(alice, "k", [3], "replace", None, expected_version=5)
    assert w.set(alice, "k", 4, None, None, expected_version=1)["version"] == 2
    too_big = "x" * (MAX_VALUE_BYTES + 1)
    with pytest.raises(InvalidInput, match=f"limit is {MAX_VALUE_BYTES} bytes"):
        w.set(alice, "k", too_big, None, None)
    with pytest.raises(InvalidInput):
        w.set(alice, "bad\nkey", 1, None, None)
    with pytest.raises(InvalidInput):
        w.set(alice, "k", 1, 0, None)
    assert w.get(alice, "k", None) | {"updated_at": ""} == {
        "key": "k", "value": 4, "version": 2, "expires_at": None, "updated_at": "", "run_id": None
    }  # fmt: skip
    with pytest.raises(NotFound):
        w.get(alice, "missing", None)


def test_another_scope_set_never_sees_or_changes_a_key(both: Engram) -> None:
    w, (alice, bob) = both.workctx, callers(both)
    w.set(bob, "plan", {"secret": True}, None, None)
    for call in (lambda: w.get(alice, "plan", None), lambda: w.history(alice, "plan", None, 10)):
        with pytest.raises(NotFound):
            call()
    assert w.keys(alice, "", None, 10)["keys"] == []
    w.set(alice, "plan", {"mine": True}, None, None)  # Alice's own key of that name
    assert w.get(bob, "plan", None)["value"] == {"secret": True} and w.get(bob, "plan", None)["version"] == 1


def test_fifty_concurrent_merges_each_land(both: Engram) -> None:
    """Fifty writers each add their own field to one key at once: all fifty fields, version 51."""
    w, (alice, _) = both.workctx, callers(both)
    w.set(alice, "shared", {}, None, None)
    errors = together(50, lambda n: w.merge(alice, "shared", {f"field{n}": n}, "merge_shallow", None))
    assert errors == []
    got: dict[str, Any] = w.get(alice, "shared", None)
    assert got["value"] == {f"field{n}": n for n in range(50)} and got["version"] == 51


def test_concurrent_sets_each_land_and_the_last_wins(both: Engram) -> None:
    """Twenty writers set one key at once, none naming a version: each gets a version of its own."""
    w, (alice, _) = both.workctx, callers(both)
    versions: list[int] = []
    errors = together(20, lambda n: versions.append(w.set(alice, "status", {"writer": n}, None, None)["version"]))
    assert errors == [] and sorted(versions) == list(range(1, 21))
    got = w.get(alice, "status", None)
    assert got["version"] == 20 and got["value"] == {"writer": got["value"]["writer"]}
    assert len(w.history(alice, "status", None, 100)["versions"]) == 20
