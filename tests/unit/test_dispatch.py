"""Dispatch: a store's failure is Cortex's `storage_error` (503, try again), any other fault stays `internal`;
and an operation builds only the services its family uses."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Coroutine
from typing import Any

import anyio
import pytest

from engram.api import dispatch
from engram.api.dispatch import storage_fault
from engram.kernel.errors import EngramError, Unavailable


def test_storage_faults_are_told_from_other_faults() -> None:
    assert storage_fault(sqlite3.OperationalError("database is locked"))
    try:
        try:
            raise sqlite3.DatabaseError("disk I/O error")
        except sqlite3.DatabaseError as inner:
            raise ValueError("while reading a record") from inner
    except ValueError as outer:
        assert storage_fault(outer)  # what it was raised from counts
    assert not storage_fault(ValueError("a bug of ours"))
    assert not storage_fault(KeyError("x"))


def test_dispatch_answers_storage_error_or_internal(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engram.families import find
    from engram.settings import Settings
    from engram.wiring import build_local

    engram = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False))
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    op = find("context_get")
    assert op is not None
    args = op.input.model_validate({"key": "k", "context_id": "acme"})
    for fault, expected in (
        (sqlite3.OperationalError("database is locked"), "storage_error"),
        (ZeroDivisionError(), "internal"),
    ):

        def failing(*_: object, fault: BaseException = fault) -> None:
            raise fault

        monkeypatch.setattr(engram.workctx, "get", failing)
        with pytest.raises(EngramError) as info:
            anyio.run(dispatch.run, engram, op, principal, args, lambda *_: None)
        assert info.value.code == expected and "trace" in info.value.message
        assert isinstance(info.value, Unavailable) == (expected == "storage_error")


def test_a_family_builds_only_the_services_it_uses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue #13: each family's Lambda builds only its own services (they are built on first use)."""
    from engram.families import find
    from engram.settings import Settings
    from engram.wiring import build_local

    engram = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False))
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    op = find("context_set")
    assert op is not None
    args = op.input.model_validate({"key": "k", "value": 1, "context_id": "acme"})
    anyio.run(dispatch.run, engram, op, principal, args, lambda *_: None)
    assert engram.built() == {"workctx"}
    engram.queue.submit("memory.index", {"context_id": "acme", "items": []})  # a job of another family
    assert engram.queue.join(30) and engram.built() == {"workctx", "memory"}  # builds its service when it runs


def test_every_call_runs_in_one_of_the_servers_slots(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """#54: dispatch runs each call in a FairShare slot, its lane the context it is for (the key's own lane when it
    names a context the key may not enter) — with one slot, a context's calls sent together run one at a time."""
    import time

    from engram.families import find
    from engram.settings import Settings
    from engram.trust.fair import FairShare
    from engram.wiring import build_local

    engram = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False))
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    engram.share = FairShare(1)
    op = find("context_get")
    assert op is not None
    seen: list[tuple[int, dict[str, int]]] = []
    real = engram.workctx.get

    def watched(*a: object, **kw: object) -> object:
        seen.append((engram.share.running, dict(engram.share.active)))
        time.sleep(0.02)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(engram.workctx, "get", watched)
    lanes: list[str] = []
    take = engram.share._take

    def taken(key: str) -> None:
        lanes.append(key)
        take(key)

    monkeypatch.setattr(engram.share, "_take", taken)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for ctx in ("acme", None, "acme", "elsewhere"):
                args = op.input.model_validate({"key": "k", **({"context_id": ctx} if ctx else {})})
                tg.start_soon(_quietly, dispatch.run(engram, op, principal, args, lambda *_: None))

    anyio.run(main)
    assert len(seen) == 3  # the call for another context is refused before it reads
    # one acme call at a time; the refused call, its key's lane's first, may run beside one (up to twice the slots)
    assert all(active.get("c:acme") == 1 and running <= 2 for running, active in seen), seen
    assert sorted(lanes) == ["c:acme"] * 3 + [f"k:{principal.key_id}"]
    assert engram.share.running == 0 and not engram.share.waiting


async def _quietly(call: Coroutine[Any, Any, object]) -> None:
    with contextlib.suppress(EngramError):
        await call


def test_a_read_gives_way_where_it_may_and_a_write_never(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """#54: dispatch wires a read's `give_way` points (engram.kernel.load) to the fair share, in its context's lane;
    a write holds its context's locks and never waits there."""
    from engram.families import find
    from engram.settings import Settings
    from engram.wiring import build_local

    engram = build_local(Settings(data_dir=tmp_path, embedder="none", queue_worker=False))
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme"])
    given: list[str] = []
    monkeypatch.setattr(engram.share, "way", lambda lane: lambda: given.append(lane))
    write, read = find("context_set"), find("context_get")
    assert write is not None and read is not None
    args = write.input.model_validate({"key": "k", "value": "v", "context_id": "acme"})
    anyio.run(dispatch.run, engram, write, principal, args, lambda *_: None)
    assert given == []
    args = read.input.model_validate({"key": "k", "context_id": "acme"})
    assert anyio.run(dispatch.run, engram, read, principal, args, lambda *_: None)["value"] == "v"
    assert given and set(given) == {"c:acme"}
