"""The embedded adapters against the port contract suites."""

import json
import sqlite3
from pathlib import Path

import pytest

from engram.adapters.local.file_blobs import FileBlobStore
from engram.adapters.local.sqlite_audit import SqliteAuditLog
from engram.adapters.local.sqlite_records import SqliteRecordStore
from engram.adapters.local.sqlite_search import SqliteSearchIndex
from engram.kernel.errors import InvalidInput
from engram.kernel.queue import Queue, StoreQueue
from tests.contract.suites import (
    CHAIN,
    AuditLogContract,
    BlobStoreContract,
    QueueContract,
    RecordStoreContract,
    SearchIndexContract,
)


class TestSqliteRecordStore(RecordStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> SqliteRecordStore:
        return SqliteRecordStore(tmp_path / "r.db")

    def test_a_count_follows_what_another_connection_commits(self, store: SqliteRecordStore, tmp_path: Path) -> None:
        """Counts are kept between writes: another process's commits (another connection) count as writes."""
        from datetime import UTC, datetime

        from engram.kernel.ports import Write

        other = SqliteRecordStore(tmp_path / "r.db")
        now = datetime(2026, 1, 1, tzinfo=UTC)
        store.transact([Write("c1", "file", "ws/a", {}, "x")], now)
        assert store.count("c1", "file", "ws/") == 1
        other.transact([Write("c1", "file", "ws/b", {}, "x")], now)
        assert store.count("c1", "file", "ws/") == 2
        assert other.purge("c1", "file", "ws/a")
        assert store.count("c1", "file", "ws/") == 1


class TestFileBlobStore(BlobStoreContract):
    @pytest.fixture
    def blobs(self, tmp_path: Path) -> FileBlobStore:
        return FileBlobStore(tmp_path / "blobs")

    def test_keys_cannot_escape_the_root(self, blobs: FileBlobStore) -> None:
        with pytest.raises(InvalidInput):
            blobs.put("../etc/passwd", b"x")


class TestSqliteSearchIndex(SearchIndexContract):
    @pytest.fixture
    def index(self, tmp_path: Path) -> SqliteSearchIndex:
        return SqliteSearchIndex(tmp_path / "s.db")

    def test_vectors_survive_a_restart(self, loaded: SqliteSearchIndex, tmp_path: Path) -> None:
        from engram.kernel.ports import SearchQuery
        from tests.contract.suites import _vec

        again = SqliteSearchIndex(tmp_path / "s.db")
        hits = again.search(SearchQuery("c1", vector=_vec(1, 0), mode="vector", k=1), self.NOW)
        assert [h.id for h in hits] == ["d1"]

    def test_each_search_sees_what_another_process_committed_before_it(
        self, index: SqliteSearchIndex, tmp_path: Path
    ) -> None:
        """A search looks for other processes' commits once (its reads share that look) and sees every one made
        before it began, in every mode: written, replaced, deleted by another connection to the file."""
        from engram.kernel.ports import IndexDoc, SearchMode, SearchQuery
        from tests.contract.suites import _vec

        other = SqliteSearchIndex(tmp_path / "s.db")

        def doc(id_: str, text: str, *v: float) -> IndexDoc:
            return IndexDoc("c1", "chunk", id_, text, _vec(*v), ("org/a",))

        def found(mode: SearchMode) -> list[str]:
            q = SearchQuery("c1", "flutter wing", _vec(1, 0), mode, 5)
            return sorted(h.id for h in index.search(q, self.NOW))

        index.upsert([doc("mine", "wing flutter at speed", 1, 0.2)])
        assert found("hybrid") == ["mine"]  # loaded
        other.upsert([doc("theirs", "flutter of a wing", 1, 0.1)])
        modes: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")
        assert all(found(m) == ["mine", "theirs"] for m in modes)
        other.upsert([doc("theirs", "a boundary layer", 0, 1)])
        assert found("bm25") == ["mine"] and found("hybrid") == ["mine", "theirs"]  # replaced: no keyword match
        other.delete("c1", ["theirs"])
        assert all(found(m) == ["mine"] for m in modes)


class TestStoreQueue(QueueContract):
    @pytest.fixture
    def setup(self, tmp_path: Path) -> tuple[Queue, SqliteRecordStore]:
        records = SqliteRecordStore(tmp_path / "r.db")
        return StoreQueue(records), records


class TestSqliteAuditLog(AuditLogContract):
    @pytest.fixture
    def log(self, tmp_path: Path) -> SqliteAuditLog:
        self.path = tmp_path / "audit.db"
        return SqliteAuditLog(self.path)

    def _edit(self, sql: str, *args: object) -> None:  # as someone with the file would, from another connection
        with sqlite3.connect(self.path) as conn:
            conn.execute(sql, args)

    def alter(self, log: object, context_id: str, seq: int) -> None:
        self._edit('UPDATE audit SET data = \'{"tool": "forged"}\' WHERE context_id=? AND seq=?', context_id, seq)

    def remove(self, log: object, context_id: str, seq: int) -> None:
        self._edit("DELETE FROM audit WHERE context_id=? AND seq=?", context_id, seq)

    def rewrite(self, log: object, context_id: str, seq: int, data: dict[str, object], prev: str, hash: str) -> None:
        self._edit("UPDATE audit SET data=?, prev=?, hash=? WHERE context_id=? AND seq=?", json.dumps(data), prev, hash,
                   context_id, seq)  # fmt: skip

    def test_expired_entries_are_swept_by_their_expiry_not_by_reading_the_whole_log(self, log: SqliteAuditLog) -> None:
        """Every PRUNE_EVERY appends, entries past their retention go; the sweep finds them by the expiry index
        (every call appends an entry: a year's log is millions of rows, which a sweep must not read)."""
        from datetime import UTC, datetime, timedelta

        from engram.adapters.local.sqlite_audit import PRUNE_EVERY, SWEEP

        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        for i in range(PRUNE_EVERY):  # the first half expires an hour in, the rest in a year; the last comes later
            lasts = timedelta(hours=1) if i < PRUNE_EVERY // 2 else timedelta(days=365)
            log.append("c1", {"i": i}, t0 + timedelta(hours=2 if i == PRUNE_EVERY - 1 else 0), t0 + lasts, CHAIN)
        with sqlite3.connect(self.path) as conn:
            assert conn.execute("SELECT count(*) FROM audit").fetchone() == (PRUNE_EVERY // 2,)  # swept at the last
            plan = " ".join(str(row[3]) for row in conn.execute(f"EXPLAIN QUERY PLAN {SWEEP}", ("x",)))
        assert "audit_expiry" in plan and "SCAN audit" not in plan, plan
        assert [e.seq for e in log.entries("c1")][:1] == [PRUNE_EVERY // 2 + 1]


@pytest.mark.parametrize("segments", [False, True])
def test_after_an_erasure_the_search_change_log_names_nothing_and_other_copies_load_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, segments: bool
) -> None:
    """#49: `search.db`'s change log kept entity ids (`Person:zelda quux`: a name) after an erasure. Now the
    expunge leaves one mark a context; a process whose copy was behind loads the context again, without the
    erased document."""
    from datetime import UTC, datetime

    from engram.kernel.ports import IndexDoc, SearchQuery
    from tests.fixtures.files import sqlite_files_holding

    now = datetime(2026, 1, 1, tzinfo=UTC)
    path = tmp_path / "search.db"
    if segments:  # the context saved as a segment too (vectors, stems and ids on disk): the erasure removes it
        from engram.adapters.local import saving

        monkeypatch.setattr(saving, "SEGMENT_MIN", 1)
    a, b = SqliteSearchIndex(path), SqliteSearchIndex(path)  # two processes on one data folder
    scopes = ["org/acme/user/alice"]
    docs = [IndexDoc("acme", "entity", "Person:zelda quux", "Zelda Quux", None, scopes, None, None, {}),
            IndexDoc("acme", "entity", "Person:bob", "Bob lives in Porto", None, scopes, None, None, {})]  # fmt: skip

    def found(index: SqliteSearchIndex, text: str) -> set[str]:
        hits = index.search(SearchQuery("acme", text, None, "bm25", 10, ("entity",), [scopes]), now)
        return {h.id for h in hits}

    a.upsert(docs)
    assert found(b, "zelda") == {"Person:zelda quux"}  # b has its copy
    if segments:
        b.flush()
        assert sqlite_files_holding(tmp_path, "search.db*", b"zelda")[b"zelda"]  # a segment holds the name
    a.upsert([IndexDoc("acme", "entity", "Person:bob", "Bob lives in Braga", None, scopes, None, None, {})])
    a.delete("acme", ["Person:zelda quux"])  # b is behind by both
    a.expunge()
    assert found(a, "zelda") == set() and found(a, "braga") == {"Person:bob"}
    assert found(b, "zelda") == set() and found(b, "braga") == {"Person:bob"} and found(b, "porto") == set()
    held = sqlite_files_holding(tmp_path, "search.db*", b"zelda", b"Zelda")
    assert held == {b"zelda": [], b"Zelda": []}, held
    a.upsert([IndexDoc("acme", "entity", "Person:carol", "Carol", None, scopes, None, None, {})])
    assert found(b, "carol") == {"Person:carol"}  # and changes flow again after the marks
