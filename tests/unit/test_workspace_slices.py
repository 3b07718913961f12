"""Files in slices of windows, for a background job that hands over between slices (the Lambda worker)."""

from __future__ import annotations

from datetime import UTC, datetime

from engram.families.workspace.shapes import slices
from engram.kernel.ports import Item


def file(name: str, chunks: int) -> Item:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Item("acme", "wfile", name, 1, {"chunks": chunks}, "t", now, now)


def test_slices_hold_at_most_their_windows_and_a_larger_file_alone() -> None:
    files = [file("a", 3), file("b", 3), file("c", 5), file("d", 12), file("e", 0), file("f", 1)]
    got = [[f.id for f in part] for part in slices(files, 6)]
    assert got == [["a", "b"], ["c"], ["d"], ["e", "f"]]
    assert [f.id for part in slices(files, 6) for f in part] == [f.id for f in files]  # each once, in order
    assert slices([], 6) == []
