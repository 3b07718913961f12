"""The in-process cache of configuration (`engram.kernel.expiring`): many keys read in one load."""

from __future__ import annotations

import threading
import time

from engram.kernel.expiring import Expiring


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


def test_a_get_many_during_a_prefetch_waits_for_it_rather_than_reading_again() -> None:
    cache: Expiring[str, int] = Expiring(60, 100)
    started, release = threading.Event(), threading.Event()
    loads: list[list[str]] = []

    def slow(keys: list[str]) -> dict[str, int]:
        loads.append(keys)
        started.set()
        release.wait(5)
        return dict.fromkeys(keys, 7)

    cache.prefetch(["a", "b"], slow)
    assert started.wait(5)
    cache.prefetch(["a", "b"], slow)  # already under way: nothing more
    got: list[dict[str, int]] = []
    reader = threading.Thread(target=lambda: got.append(cache.get_many(["a", "b", "c"], slow)))
    reader.start()
    time.sleep(0.05)
    release.set()
    reader.join(5)
    assert got == [{"a": 7, "b": 7, "c": 7}]
    assert loads == [["a", "b"], ["c"]]  # the prefetch's, and only what it did not cover


def test_a_prefetch_dropped_or_failed_is_not_kept_and_the_next_read_loads() -> None:
    cache: Expiring[str, int] = Expiring(60, 100)
    release = threading.Event()

    def slow(keys: list[str]) -> dict[str, int]:
        release.wait(5)
        return dict.fromkeys(keys, 1)

    cache.prefetch(["q"], slow)
    cache.drop("q")  # a setter changed it meanwhile
    release.set()
    time.sleep(0.1)
    assert cache.get_many(["q"], lambda keys: dict.fromkeys(keys, 2)) == {"q": 2}

    def broken(keys: list[str]) -> dict[str, int]:
        raise OSError("store unreachable")

    cache.prefetch(["r"], broken)
    time.sleep(0.05)
    assert cache.get_many(["r"], lambda keys: dict.fromkeys(keys, 3)) == {"r": 3}
