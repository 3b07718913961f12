"""A memory batch over a record store with small transactions is committed in groups that see each other."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from engram.adapters.local.sqlite_records import SqliteRecordStore
from engram.families.memory.base import Turn
from engram.families.memory.plan import session_key
from engram.kernel.caller import ANY
from engram.kernel.ports import Item, Write
from engram.settings import Settings
from engram.wiring import Engram, build_local


class SmallTransactions(SqliteRecordStore):
    max_writes = 12

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.sizes: list[int] = []

    def transact(self, writes: Sequence[Write], now: datetime) -> list[Item]:
        assert len(writes) <= self.max_writes, "a transaction over the store's cap"
        self.sizes.append(len(writes))
        return super().transact(writes, now)


def test_batch_is_split_to_fit_and_later_groups_see_earlier_ones(tmp_path: Path) -> None:
    base = build_local(Settings(data_dir=tmp_path, embedder="none"))
    records = SmallTransactions(tmp_path / "small.db")
    e = Engram(base.settings, records, base.blobs, base.index, None, base.clock)
    _, p = e.identity.create_key(["acme"], "agent", ["org/acme"])
    caller = e.identity.enter(p, "acme", ANY, "t")
    records.sizes.clear()
    turns = [Turn(f"I live in City{i}.", session_id="s") for i in range(6)]
    out = e.memory.store_many(caller, turns, None)
    assert len(records.sizes) > 1  # more than one transaction was needed
    assert [o["attributes"][0]["action"] for o in out] == ["created"] + ["superseded"] * 5
    assert [a["value"] for a in e.memory.profile(caller, None)["static"] if a["key"] == "location"] == ["City5"]
    session = records.get("acme", "session", session_key("s", list(caller.principal.grant)))
    assert session is not None and session.data["turns"] == 6
