"""The in-process cache of configuration (`engram.expiring`): many keys read in one load."""

from __future__ import annotations

import time

from engram.expiring import Expiring


def test_get_many_loads_only_what_is_missing_in_one_call_and_keeps_absent_answers() -> None:
    cache: Expiring[str, int | None] = Expiring(60, 100)
    loads: list[list[str]] = []

    def load(keys: list[str]) -> dict[str, int | None]:
        loads.append(keys)
        return {k: (None if k == "none" else len(k)) for k in keys}

    assert cache.get("ab", lambda: 2) == 2
    assert cache.get_many(["ab", "abc", "none"], load) == {"ab": 2, "abc": 3, "none": None}
    assert loads == [["abc", "none"]]
    assert cache.get_many(["abc", "none"], load) == {"abc": 3, "none": None}  # an absent answer is kept too
    assert loads == [["abc", "none"]]
    cache.drop("abc")
    assert cache.get_many(["abc", "ab"], load) == {"abc": 3, "ab": 2} and loads[-1] == ["abc"]


def test_get_many_reads_again_once_expired_and_a_full_cache_starts_again() -> None:
    cache: Expiring[str, int] = Expiring(0.05, 3)
    loads: list[list[str]] = []

    def load(keys: list[str]) -> dict[str, int]:
        loads.append(keys)
        return dict.fromkeys(keys, len(loads))

    assert cache.get_many(["a", "b"], load) == {"a": 1, "b": 1}
    time.sleep(0.06)
    assert cache.get_many(["a", "b"], load) == {"a": 2, "b": 2}
    assert cache.get_many(["c", "d"], load) == {"c": 3, "d": 3}  # 4 > 3 entries: emptied, then these kept
    assert cache.get_many(["a"], load) == {"a": 4}
