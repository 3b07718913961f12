"""Port contract suites. An adapter's test module subclasses these and provides the `store` fixture.

Pattern from LangChain's standard-tests: the suite holds the assertions; subclasses only build.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from engram.kernel.clock import FixedClock as FrozenClock
from engram.kernel.errors import Conflict, InvalidInput, NotFound
from engram.kernel.ports import (
    AuditEntry,
    AuditLog,
    BlobStore,
    IndexDoc,
    RecordStore,
    SearchIndex,
    SearchQuery,
    Write,
    scan,
)
from engram.kernel.queue import JOBS, Queue
from engram.search.rules import Rules
from engram.trust.audit import Auditor, Chain, legacy_seal
from tests.concurrency import together

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHAIN = Chain(lambda: b"the deployment's audit key, 32 b")  # the contract tests' audit key


class RecordStoreContract:
    @pytest.fixture
    def store(self) -> RecordStore:
        raise NotImplementedError

    def test_versions_and_history(self, store: RecordStore) -> None:
        a = store.transact([Write("c1", "rec", "r1", {"v": 1}, "alice", expected_version=0)], T0)[0]
        assert a.version == 1
        b = store.transact([Write("c1", "rec", "r1", {"v": 2}, "bob", expected_version=1)], T0 + timedelta(1))[0]
        assert b.version == 2
        got = store.get("c1", "rec", "r1")
        assert got is not None and got.data == {"v": 2} and got.version == 2 and got.actor == "bob"
        assert got.created_at == T0 and got.updated_at == T0 + timedelta(1)
        hist = store.history("c1", "rec", "r1")
        assert [(h.version, h.data["v"], h.actor) for h in hist] == [(1, 1, "alice"), (2, 2, "bob")]

    def test_conditional_write_conflicts_and_leaves_nothing(self, store: RecordStore) -> None:
        store.transact([Write("c1", "rec", "r1", {"v": 1}, "a", expected_version=0)], T0)
        with pytest.raises(Conflict):
            store.transact(
                [
                    Write("c1", "rec", "r2", {"v": 1}, "a", expected_version=0),
                    Write("c1", "rec", "r1", {"v": 9}, "a", expected_version=0),  # exists: fails
                ],
                T0,
            )
        assert store.get("c1", "rec", "r2") is None  # all or nothing
        item = store.get("c1", "rec", "r1")
        assert item is not None and item.data == {"v": 1}

    def test_concurrent_writers_lose_no_update(self, store: RecordStore) -> None:
        store.transact([Write("c1", "ctr", "n", {"n": 0}, "a", expected_version=0)], T0)

        def bump() -> None:
            for _ in range(10):
                while True:
                    cur = store.get("c1", "ctr", "n")
                    assert cur is not None
                    try:
                        store.transact([Write("c1", "ctr", "n", {"n": cur.data["n"] + 1}, "a", cur.version)], T0)
                        break
                    except Conflict:
                        continue

        threads = [threading.Thread(target=bump) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        final = store.get("c1", "ctr", "n")
        assert final is not None and final.data["n"] == 40 and final.version == 41

    def test_query_prefix_order_pagination_and_tenancy(self, store: RecordStore) -> None:
        for i in range(7):
            store.transact([Write("c1", "doc", f"a:{i}", {"i": i}, "x")], T0)
        store.transact([Write("c1", "doc", "b:0", {"i": 99}, "x"), Write("c2", "doc", "a:9", {"i": 9}, "x")], T0)
        page = store.query("c1", "doc", prefix="a:", limit=3)
        ids = [i.id for i in page.items]
        while page.cursor:
            page = store.query("c1", "doc", prefix="a:", limit=3, cursor=page.cursor)
            ids += [i.id for i in page.items]
        assert ids == [f"a:{i}" for i in range(7)]
        desc = store.query("c1", "doc", prefix="a:", limit=2, descending=True)
        assert [i.id for i in desc.items] == ["a:6", "a:5"]
        assert store.get("c2", "doc", "a:0") is None

    def test_squash_keeps_only_the_latest_version(self, store: RecordStore) -> None:
        """Issue #27: what an object said before its latest version goes, physically (an erasure's)."""
        for n in range(4):
            store.transact([Write("c1", "entity", "e1", {"said": f"v{n + 1}"}, "x", n)], T0)
        store.transact([Write("c1", "entity", "e2", {"said": "other"}, "x", 0)], T0)
        assert [i.version for i in store.history("c1", "entity", "e1")] == [1, 2, 3, 4]
        assert store.squash("c1", "entity", "e1") == 3
        assert [(i.version, i.data) for i in store.history("c1", "entity", "e1")] == [(4, {"said": "v4"})]
        assert [i.version for i in store.history_page("c1", "entity", "e1", None, 10)] == [4]
        assert store.get("c1", "entity", "e1").data == {"said": "v4"}  # type: ignore[union-attr]
        assert store.squash("c1", "entity", "e1") == 0  # nothing more
        assert len(store.history("c1", "entity", "e2")) == 1 and store.squash("c1", "entity", "nope") == 0
        store.transact([Write("c1", "entity", "e1", {"said": "v5"}, "x", 4)], T0)  # the item goes on from there
        assert [i.version for i in store.history("c1", "entity", "e1")] == [4, 5]

    def test_count_and_ids_match_query_without_reading_items(self, store: RecordStore) -> None:
        """Issue #26: a count and the ids of a kind (by prefix, live items only, one context) that agree with
        paging."""
        for i in range(5):
            store.transact([Write("c1", "file", f"ws/a{i}", {"i": i}, "x")], T0)
        store.transact([Write("c1", "file", "ws/tmp", {}, "x", expires_at=T0 + timedelta(seconds=10))], T0)
        store.transact([Write("c1", "file", "other/b", {}, "x"), Write("c2", "file", "ws/z", {}, "x")], T0)
        assert (
            store.count("c1", "file", "ws/", now=T0) == 6 == len(store.query("c1", "file", prefix="ws/", now=T0).items)
        )
        assert store.count("c1", "file", "ws/", now=T0 + timedelta(seconds=11)) == 5  # the expired one is gone
        assert store.count("c1", "file") == 6 and store.count("c2", "file") == 1 and store.count("c3", "file") == 0
        assert store.ids("c1", "file", "ws/", now=T0) == ["ws/a0", "ws/a1", "ws/a2", "ws/a3", "ws/a4", "ws/tmp"]
        assert store.ids("c1", "file", "ws/", now=T0 + timedelta(seconds=11)) == [f"ws/a{i}" for i in range(5)]
        assert store.ids("c1", "file", "ws/", limit=2, now=T0) == ["ws/a0", "ws/a1"]
        assert store.ids("c1", "file") == ["other/b", *(f"ws/a{i}" for i in range(5))]  # ws/tmp expired by now
        assert store.ids("c3", "file") == [] and store.ids("c1", "file", "ws/", limit=0) == []

    def test_a_count_asked_again_follows_every_write_between(self, store: RecordStore) -> None:
        """A count asked twice with writes, purges and a refused transaction between answers as of each."""
        assert store.count("c1", "file", "ws/") == 0
        store.transact([Write("c1", "file", "ws/a", {}, "x")], T0)
        assert store.count("c1", "file", "ws/") == 1 == store.count("c1", "file", "ws/")
        store.transact([Write("c1", "file", "ws/b", {}, "x"), Write("c1", "file", "ws/c", {}, "x")], T0)
        assert store.count("c1", "file", "ws/") == 3
        with pytest.raises(Conflict):
            store.transact([Write("c1", "file", "ws/d", {}, "x"), Write("c1", "file", "ws/a", {}, "x", 0)], T0)
        assert store.count("c1", "file", "ws/") == 3
        assert store.purge("c1", "file", "ws/b")
        assert store.count("c1", "file", "ws/") == 2 and store.count("c1", "file") == 2

    def test_a_check_requires_a_version_and_writes_nothing(self, store: RecordStore) -> None:
        def check(version: int) -> Write:
            return Write("c1", "fence", "f", {}, "x", expected_version=version, check=True)

        assert store.transact([Write("c1", "doc", "a", {}, "x"), check(0)], T0)[0].version == 1  # absent: 0
        assert store.get("c1", "fence", "f") is None  # a check writes nothing
        store.transact([Write("c1", "fence", "f", {"closed": False}, "x", 0)], T0)
        store.transact([Write("c1", "doc", "b", {}, "x"), check(1)], T0)
        store.transact([Write("c1", "doc", "c", {}, "x"), check(1)], T0)  # checks never conflict with checks
        store.transact([Write("c1", "fence", "f", {"closed": True}, "x", 1)], T0)
        with pytest.raises(Conflict):
            store.transact([Write("c1", "doc", "d", {}, "x"), check(1)], T0)
        assert store.get("c1", "doc", "d") is None  # the failed check took its write with it
        assert store.get("c1", "fence", "f").version == 2  # type: ignore[union-attr]

    def test_ttl_hides_expired_items(self, store: RecordStore) -> None:
        store.transact([Write("c1", "tmp", "t", {}, "x", expires_at=T0 + timedelta(hours=1))], T0)
        assert store.query("c1", "tmp", now=T0).items
        assert not store.query("c1", "tmp", now=T0 + timedelta(hours=2)).items
        assert store.get("c1", "tmp", "t", now=T0) is not None
        assert store.get("c1", "tmp", "t", now=T0 + timedelta(hours=2)) is None
        assert store.get("c1", "tmp", "t") is None  # the present is long past T0 + 1 h
        store.transact([Write("c1", "tmp", "live", {}, "x", expires_at=datetime.now(UTC) + timedelta(hours=1))], T0)
        assert store.get("c1", "tmp", "live") is not None

    def test_key_ranges_batched_reads_and_history_pages(self, store: RecordStore) -> None:
        ids = [f"t\x1fn\x1f{v}\x1fr{i}" for i, v in enumerate(["a", "b", "ba", "bb", "c", "d"])]
        store.transact([Write("c1", "lk", i, {"n": n}, "a", 0) for n, i in enumerate(ids)], T0)
        store.transact([Write("c2", "lk", ids[1], {}, "a", 0)], T0)  # another tenant, same id
        page = store.query("c1", "lk", prefix="t\x1fn\x1f", start="t\x1fn\x1fb", end="t\x1fn\x1fc\U0010ffff")
        assert [i.id for i in page.items] == ids[1:5] and page.cursor is None
        down = store.query("c1", "lk", start="t\x1fn\x1fb", end="t\x1fn\x1fbb\U0010ffff", descending=True, limit=2)
        rest = store.query(
            "c1", "lk", start="t\x1fn\x1fb", end="t\x1fn\x1fbb\U0010ffff", descending=True, cursor=down.cursor
        )
        assert [i.id for i in down.items + rest.items] == [ids[3], ids[2], ids[1]]
        many = store.get_many("c1", "lk", [ids[0], ids[4], "missing", ids[0]])
        assert sorted(many) == sorted([ids[0], ids[4]]) and many[ids[4]].data == {"n": 4}
        assert store.get_many("c2", "lk", ids).keys() == {ids[1]}
        for v in range(2, 8):
            store.transact([Write("c1", "lk", ids[0], {"n": v}, "a", v - 1)], T0)
        newest = store.history_page("c1", "lk", ids[0], None, 3)
        older = store.history_page("c1", "lk", ids[0], newest[-1].version, 10)
        assert [h.version for h in newest] == [7, 6, 5] and [h.version for h in older] == [4, 3, 2, 1]

    def test_a_history_page_of_large_versions_holds_what_it_was_asked(self, store: RecordStore) -> None:
        """DynamoDB stops a query at a megabyte: 14 versions of 100 KB came back as ~10, and `version_history`
        diffed the last of them from nothing (and an export took the short page for the end)."""
        for v in range(14):
            store.transact([Write("c1", "big", "b", {"n": v, "pad": "x" * 100_000}, "a", v)], T0)
        page = store.history_page("c1", "big", "b", None, 13)
        assert [h.version for h in page] == list(range(14, 1, -1))
        assert [h.version for h in store.history_page("c1", "big", "b", 3, 13)] == [2, 1]

    def test_remove_takes_an_item_out_in_the_transaction(self, store: RecordStore) -> None:
        store.transact([Write("c1", "lk", "x", {}, "a", 0), Write("c1", "lk", "y", {}, "a", 0)], T0)
        with pytest.raises(Conflict):  # a removal is version-checked like any write, and all-or-nothing
            store.transact([Write("c1", "lk", "x", {}, "a", 1, remove=True), Write("c1", "lk", "y", {}, "a", 5)], T0)
        assert store.get("c1", "lk", "x") is not None
        store.transact([Write("c1", "lk", "x", {}, "a", 1, remove=True), Write("c1", "lk", "z", {}, "a", 0)], T0)
        assert store.get("c1", "lk", "x") is None and store.history("c1", "lk", "x") == []
        assert [i.id for i in store.query("c1", "lk").items] == ["y", "z"]
        again = store.transact([Write("c1", "lk", "x", {"back": True}, "a", 0)], T0)[0]
        assert again.version == 1  # it starts again

    def test_purge_removes_item_and_history(self, store: RecordStore) -> None:
        store.transact([Write("c1", "rec", "p", {}, "x")], T0)
        assert store.purge("c1", "rec", "p")
        assert store.get("c1", "rec", "p") is None and store.history("c1", "rec", "p") == []
        assert not store.purge("c1", "rec", "p")

    def test_version_counts_and_purge_many_without_reading_each(self, store: RecordStore) -> None:
        """Issue #27: an erasure counts a subject's versions and deletes its items in bulk, one context and kind,
        another's untouched."""
        for n, id_ in enumerate(["a", "b", "c"]):
            for v in range(n + 1):
                store.transact([Write("c1", "rec", id_, {"v": v}, "x", v)], T0)
        store.transact([Write("c2", "rec", "a", {}, "x", 0), Write("c1", "other", "a", {}, "x", 0)], T0)
        many = [f"m{i}" for i in range(620)]  # past one statement's part
        for start in range(0, len(many), 40):
            store.transact([Write("c1", "rec", i, {}, "x", 0) for i in many[start : start + 40]], T0)
        assert store.version_counts("c1", "rec", ["a", "b", "c", "nope", "a"]) == {"a": 1, "b": 2, "c": 3}
        assert sum(store.version_counts("c1", "rec", many).values()) == 620
        assert store.version_counts("c1", "rec", []) == {}
        assert store.purge_many("c1", "rec", ["a", "c", "nope", "c"]) == 2
        assert store.version_counts("c1", "rec", ["a", "b", "c"]) == {"b": 2}
        assert store.get("c1", "rec", "a") is None and store.history("c1", "rec", "c") == []
        assert store.purge_many("c1", "rec", many) == 620 and store.count("c1", "rec") == 1
        assert store.get("c2", "rec", "a") is not None and store.get("c1", "other", "a") is not None
        assert store.purge_many("c1", "rec", []) == 0


class BlobStoreContract:
    @pytest.fixture
    def blobs(self) -> BlobStore:
        raise NotImplementedError

    def test_round_trip_overwrite_delete(self, blobs: BlobStore) -> None:
        blobs.put("ctx/doc/1", b"hello")
        assert blobs.get("ctx/doc/1") == b"hello" and blobs.exists("ctx/doc/1")
        blobs.put("ctx/doc/1", b"\x00\x01binary")
        assert blobs.get("ctx/doc/1") == b"\x00\x01binary"
        blobs.delete("ctx/doc/1")
        assert not blobs.exists("ctx/doc/1")
        with pytest.raises(NotFound):
            blobs.get("ctx/doc/1")

    def test_erase_takes_the_blob_and_leaves_the_others(self, blobs: BlobStore) -> None:
        blobs.put("ctx/doc/1", b"one")
        blobs.put("ctx/doc/1", b"one again")
        blobs.put("ctx/doc/10", b"a neighbour whose key the first one's begins")
        blobs.erase("ctx/doc/1")
        assert not blobs.exists("ctx/doc/1") and blobs.get("ctx/doc/10").startswith(b"a neighbour")
        blobs.erase("ctx/doc/nothing")  # nothing there: no error


MODES = ("bm25", "vector", "hybrid")


def _vec(*xs: float) -> np.ndarray:
    v = np.zeros(8, dtype=np.float32)
    v[: len(xs)] = xs
    return v / np.linalg.norm(v)


class SearchIndexContract:
    @pytest.fixture
    def index(self) -> SearchIndex:
        raise NotImplementedError

    @pytest.fixture
    def loaded(self, index: SearchIndex) -> SearchIndex:
        index.upsert(
            [
                IndexDoc("c1", "turn", "d1", "the cat sat on the mat", _vec(1, 0), ["org/acme/user/alice"], T0),
                IndexDoc("c1", "turn", "d2", "dogs chase cats in the park", _vec(0.9, 0.1), ["org/acme/user/bob"], T0),
                IndexDoc(
                    "c1",
                    "attribute",
                    "d3",
                    "alice location: Paris",
                    _vec(0, 1),
                    ["org/acme/user/alice"],
                    T0,
                    T0 + timedelta(days=10),
                    {"key": "location"},
                ),
                IndexDoc(
                    "c1",
                    "attribute",
                    "d4",
                    "alice location: Berlin",
                    _vec(0.1, 1),
                    ["org/acme/user/alice"],
                    T0 + timedelta(days=10),
                    None,
                    {"key": "location"},
                ),
                IndexDoc("c2", "turn", "x1", "the cat of another tenant", _vec(1, 0), ["org/globex"], T0),
            ]
        )
        return index

    NOW = T0 + timedelta(days=20)

    def test_bm25_stems_and_ranks(self, loaded: SearchIndex) -> None:
        hits = loaded.search(SearchQuery("c1", "cats", mode="bm25", k=5), self.NOW)
        assert {h.id for h in hits} == {"d1", "d2"}  # "cats" matches "cat" through stemming
        assert all(h.score > 0 for h in hits) and hits == sorted(hits, key=lambda h: -h.score)

    def test_vector_is_cosine_and_ordered(self, loaded: SearchIndex) -> None:
        hits = loaded.search(SearchQuery("c1", vector=_vec(1, 0), mode="vector", k=2), self.NOW)
        assert [h.id for h in hits] == ["d1", "d2"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-4)
        far = loaded.search(SearchQuery("c1", vector=_vec(0, 0, 1), mode="vector", k=5), self.NOW)
        assert far and all(h.score == 0 and h.semantic == 0 for h in far)  # orthogonal: no evidence at all

    def test_hybrid_fuses_both(self, loaded: SearchIndex) -> None:
        hits = loaded.search(SearchQuery("c1", "Berlin", _vec(0.1, 1), "hybrid", k=3), self.NOW)
        assert hits[0].id == "d4" and 0 <= hits[-1].score <= hits[0].score <= 1

    def test_scores_are_the_same_evidence_in_every_mode(self, loaded: SearchIndex) -> None:
        """docs/tools.md "Scores": in [0, 1], never rising down a list, and a passage's score is the same whatever
        the mode that found it; the term counts behind the lexical part are those of what the query may return (d3's
        validity ended: three documents), the context's own four for `term_counts`."""
        from engram.search.rules import lexical_evidence, query_weights
        from engram.search.terms import bm25_idf

        assert loaded.term_counts("c1", ["cat", "mat", "zzz"]) == (4, {"cat": 2, "mat": 1, "zzz": 0})
        lists = {m: loaded.search(SearchQuery("c1", "cat mat", _vec(1, 0), m, k=4), self.NOW) for m in MODES}
        for hits in lists.values():
            assert hits and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
            assert all(0 <= h.score <= 1 for h in hits)
            assert hits[0].id == "d1" and hits[0].score == 1.0 and (hits[0].lexical, hits[0].semantic) == (1.0, 1.0)
        # without a query vector the score is the lexical evidence alone: d2 has "cats", not "mat"
        weights = query_weights("cat mat")
        idf = {"cat": bm25_idf(3, 2), "mat": bm25_idf(3, 1)}
        lexical = loaded.search(SearchQuery("c1", "cat mat", None, "bm25", k=4), self.NOW)
        d2 = next(h for h in lexical if h.id == "d2")
        assert d2.semantic is None and d2.score == pytest.approx(lexical_evidence(weights, idf, d2.text), abs=1e-6)
        assert 0 < d2.score < 0.5  # a third of the query's information: a weak match

    def test_a_score_says_nothing_of_what_the_caller_cannot_see(self, loaded: SearchIndex) -> None:
        """Rule 4: the statistics behind a score count what the search may return. Memories in a scope the caller
        cannot see (bob's, many of them with the query's words) leave alice's scores as they were."""
        loaded.upsert([IndexDoc("c1", "turn", "a1", "a cat naps", _vec(1, 0), ["org/acme/user/alice"], T0)])
        alice = SearchQuery("c1", "cat mat", None, "bm25", 10, visibility=[["org/acme/user/alice"]])
        before = {h.id: h.score for h in loaded.search(alice, self.NOW)}
        assert set(before) == {"d1", "a1"} and 0 < before["a1"] < before["d1"]  # a1 holds "cat" only
        bob = ["org/acme/user/bob"]
        loaded.upsert([IndexDoc("c1", "turn", f"b{i}", "my cat", _vec(0, 1), bob, T0) for i in range(20)])
        after = {h.id: h.score for h in loaded.search(alice, self.NOW)}
        assert after == pytest.approx(before, abs=1e-6)
        seen = loaded.search(SearchQuery("c1", "cat mat", None, "bm25", 30), self.NOW)
        assert len(seen) > 20 and next(h for h in seen if h.id == "a1").score < before["a1"] - 0.01  # unfiltered

    def test_values_counts_a_key_within_the_filters(self, loaded: SearchIndex) -> None:
        """`values`: each string value of a metadata key among what a query may return (what a recall that names
        people narrows by): only the caller's scopes, valid documents of the kinds and metadata asked, most first."""
        alice, bob = ["org/acme/user/alice"], ["org/acme/user/bob"]

        def doc(id_: str, speaker: str, session: str, scopes: list[str], kind: str = "turn",
                until: datetime | None = None) -> IndexDoc:  # fmt: skip
            meta = {"speaker": speaker} | ({"session_id": session} if session else {})  # v8: none
            return IndexDoc("c1", kind, id_, "hello there", None, scopes, T0, until, meta)

        loaded.upsert(
            [
                doc("v1", "Ann", "s1", alice), doc("v2", "Ann", "s1", alice), doc("v3", "Ann", "s2", alice),
                doc("v4", "Ann", "s3", bob), doc("v5", "Cy", "s4", alice), doc("v6", "Ann", "s5", alice, kind="fact"),
                doc("v7", "Ann", "s6", alice, until=T0 + timedelta(days=1)), doc("v8", "Ann", "", alice),
                IndexDoc("c2", "turn", "v9", "hi", None, alice, T0, None, {"speaker": "Ann", "session_id": "s7"}),
            ]
        )  # fmt: skip
        q = SearchQuery("c1", kinds=("turn",), visibility=[alice], metadata={"speaker": ["Ann", "Bo"]})
        assert loaded.values(q, "session_id", self.NOW, 100) == {"s1": 2, "s2": 1}
        assert loaded.values(replace(q, visibility=None), "session_id", self.NOW, 100) == {"s1": 2, "s2": 1, "s3": 1}
        assert loaded.values(replace(q, as_of=T0), "session_id", self.NOW, 100) == {"s1": 2, "s2": 1, "s6": 1}
        assert loaded.values(replace(q, kinds=None), "speaker", self.NOW, 100) == {"Ann": 5}
        assert loaded.values(q, "session_id", self.NOW, 3) is None  # four documents: more than `most`
        assert loaded.values(replace(q, metadata={"speaker": "Nobody"}), "session_id", self.NOW, 100) == {}

    def test_filters_tenant_kind_scope_validity_metadata(self, loaded: SearchIndex) -> None:
        q = SearchQuery("c1", "cat", _vec(1, 0), "hybrid", k=10)
        assert "x1" not in {h.id for h in loaded.search(q, self.NOW)}
        only_alice = SearchQuery("c1", "cat", _vec(1, 0), "hybrid", 10, visibility=[["org/acme/user/alice"]])
        assert {h.id for h in loaded.search(only_alice, self.NOW)} <= {"d1", "d3", "d4"}
        attrs = SearchQuery("c1", "location", _vec(0, 1), "hybrid", 10, kinds=["attribute"])
        assert [h.id for h in loaded.search(attrs, self.NOW)] == ["d4"]  # d3 is no longer valid
        past = SearchQuery("c1", "location", _vec(0, 1), "hybrid", 10, kinds=["attribute"], as_of=T0 + timedelta(1))
        assert [h.id for h in loaded.search(past, self.NOW)] == ["d3"]
        meta = SearchQuery("c1", "alice", None, "bm25", 10, metadata={"key": ["location"]})
        assert {h.id for h in loaded.search(meta, self.NOW)} == {"d4"}

    def test_feedback_keeps_every_filter(self, loaded: SearchIndex) -> None:
        loaded.upsert([IndexDoc("c1", "turn", "d5", "a mat by the door", _vec(0, 0, 1), ["org/acme/user/bob"], T0)])

        def ranks(**kw: object) -> list[str]:
            q = SearchQuery("c1", "cat", _vec(1, 0), "hybrid", 10, **kw)  # type: ignore[arg-type]
            return [h.id for h in loaded.search(q, self.NOW)]

        loaded.rules = Rules("feedback", feedback=True)  # a measured alternative (bench/protocol.py)

        found = ranks()
        assert found[0] == "d1" and "d5" in found  # "mat", from the best passage, reaches d5
        assert "x1" not in found and "d3" not in found  # another tenant's; no longer valid
        assert set(ranks(visibility=[["org/acme/user/alice"]])) <= {"d1", "d3", "d4"}
        assert set(ranks(kinds=["turn"])) == {"d1", "d2", "d5"}

    def test_vectors_returns_the_stored_ones_of_the_context(self, loaded: SearchIndex) -> None:
        loaded.upsert([IndexDoc("c1", "chunk", "n1", "no vector yet", None, ["org/acme"], T0)])
        got = loaded.vectors("c1", ["d1", "d4", "n1", "x1", "missing"])
        assert set(got) == {"d1", "d4"}  # n1 has none, x1 is another context's, missing is unknown
        # at least half precision (OpenSearch returns its compact copies)
        assert np.allclose(got["d1"], _vec(1, 0), atol=1e-3) and np.allclose(got["d4"], _vec(0.1, 1), atol=1e-3)
        assert loaded.vectors("c1", []) == {}

    def test_delete_and_set_validity_apply_at_once(self, loaded: SearchIndex) -> None:
        loaded.delete("c1", ["d1"])
        assert "d1" not in {h.id for h in loaded.search(SearchQuery("c1", "cat", _vec(1, 0), k=10), self.NOW)}
        loaded.set_validity("c1", "d4", T0 + timedelta(days=15))
        q = SearchQuery("c1", "Berlin", _vec(0.1, 1), k=10, kinds=["attribute"])
        assert loaded.search(q, self.NOW) == []
        assert loaded.count("c1") == 3

    def test_upsert_closes_validity_in_the_same_call(self, loaded: SearchIndex) -> None:
        new = IndexDoc("c1", "attribute", "d6", "alice location: Rome", _vec(0.2, 1), ["org/acme/user/alice"], T0)
        loaded.upsert([new], [("c1", "d4", T0 + timedelta(days=15)), ("c1", "missing", T0)])
        q = SearchQuery("c1", "location", _vec(0, 1), "hybrid", 10, kinds=["attribute"])
        assert [h.id for h in loaded.search(q, self.NOW)] == ["d6"]  # d4 closed, d3 long closed
        loaded.upsert([], [("c1", "d4", None)])  # reopened (the undo a failed commit makes)
        assert {h.id for h in loaded.search(q, self.NOW)} == {"d4", "d6"}

    def test_upsert_replaces(self, loaded: SearchIndex) -> None:
        loaded.upsert([IndexDoc("c1", "turn", "d1", "completely new words", _vec(0, 0, 1), ["org/acme"], T0)])
        assert loaded.search(SearchQuery("c1", "mat", mode="bm25", k=5), self.NOW) == []
        hits = loaded.search(SearchQuery("c1", vector=_vec(0, 0, 1), mode="vector", k=1), self.NOW)
        assert hits[0].id == "d1" and hits[0].text == "completely new words"


class QueueContract:
    """A Queue over a RecordStore: jobs are records committed with the writes that need them."""

    @pytest.fixture
    def setup(self) -> tuple[Queue, RecordStore]:
        raise NotImplementedError

    @staticmethod
    def open_jobs(records: RecordStore) -> list[str]:
        return [i.id for i in scan(records, JOBS, "job") if i.data["status"] != "failed"]

    def test_submitted_jobs_run_and_leave_no_record(self, setup: tuple[Queue, RecordStore]) -> None:
        queue, records = setup
        seen: list[int] = []
        queue.register("record", lambda p: seen.append(p["n"]))
        for n in range(3):
            queue.submit("record", {"n": n})
        assert queue.join(30) and sorted(seen) == [0, 1, 2]
        assert self.open_jobs(records) == []

    def test_a_job_goes_with_its_write_or_not_at_all(self, setup: tuple[Queue, RecordStore]) -> None:
        queue, records = setup
        seen: list[str] = []
        queue.register("index", lambda p: seen.append(p["doc"]))
        records.transact([Write("c1", "doc", "d1", {}, "t")], T0)
        lost = queue.job("index", {"doc": "lost"}, T0)
        with pytest.raises(Conflict):
            records.transact([Write("c1", "doc", "d1", {}, "t", expected_version=0), lost], T0)
        kept = queue.job("index", {"doc": "kept"}, T0)
        records.transact([Write("c1", "doc", "d1", {}, "t", expected_version=1), kept], T0)
        queue.started([kept])
        assert queue.join(30) and seen == ["kept"]
        assert self.open_jobs(records) == []

    def test_a_safety_net_withdrawn_never_runs(self, setup: tuple[Queue, RecordStore]) -> None:
        queue, records = setup
        seen: list[int] = []
        queue.register("net", lambda p: seen.append(1))
        net = queue.job("net", {}, datetime.now(UTC), delay=timedelta(seconds=30))
        records.transact([net], T0)
        assert self.open_jobs(records) == [net.id]
        queue.done(net)
        assert queue.join(30) and seen == [] and self.open_jobs(records) == []

    def test_a_started_job_withdrawn_by_its_writer_never_runs(self, setup: tuple[Queue, RecordStore]) -> None:
        """Issue #24: a write commits a safety net, starts it, does the work itself and withdraws it. On SQS the
        message was sent at once and the worker ran the job anyway (a second index, a second embedding)."""
        queue, records = setup
        seen: list[int] = []
        queue.register("net", lambda p: seen.append(1))
        net = queue.job("net", {}, datetime.now(UTC), delay=timedelta(seconds=1))
        records.transact([net], T0)
        queue.started([net])
        queue.done(net)
        time.sleep(1.5)  # past its due time: nothing holds it back any more but its withdrawal
        assert queue.join(30) and seen == [] and self.open_jobs(records) == []

    def test_a_delayed_job_never_runs_before_it_is_due(self, setup: tuple[Queue, RecordStore]) -> None:
        queue, records = setup
        ran: list[datetime] = []
        queue.register("later", lambda p: ran.append(datetime.now(UTC)))
        due = datetime.now(UTC) + timedelta(seconds=2)
        job = queue.job("later", {}, due - timedelta(seconds=2), delay=timedelta(seconds=2))
        records.transact([job], T0)
        queue.started([job])
        queue.join(0.5)  # a worker that looks now finds nothing to run yet
        assert ran == []
        time.sleep(2.2)
        deadline = time.monotonic() + 10  # a delayed message shows up a moment after its delay (LocalStack: < 1 s)
        while queue.join(30) and not ran and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(ran) == 1 and ran[0] >= due - timedelta(milliseconds=50)
        assert self.open_jobs(records) == []

    def test_a_domain_error_ends_the_job(self, setup: tuple[Queue, RecordStore]) -> None:
        queue, records = setup
        calls: list[int] = []

        def corrupt(p: dict[str, object]) -> None:
            calls.append(1)
            raise InvalidInput("corrupt file")

        queue.register("ingest", corrupt)
        queue.submit("ingest", {})
        assert queue.join(30) and calls == [1] and self.open_jobs(records) == []

    def test_unknown_jobs_and_payloads_no_queue_could_carry_are_refused(self, setup: tuple[Queue, RecordStore]) -> None:
        queue, records = setup
        queue.register("ok", lambda p: None)
        with pytest.raises(KeyError):
            queue.submit("missing", {})
        with pytest.raises(TypeError):
            queue.submit("ok", {"lock": threading.Lock()})
        assert self.open_jobs(records) == []


class AuditLogContract:
    """Issue #27: an append-only, hash-chained log per context. Subclasses provide `log` and two ways to
    tamper with what the adapter stores (`alter`: change an entry's content in place; `remove`: delete one)."""

    @pytest.fixture
    def log(self) -> AuditLog:
        raise NotImplementedError

    def alter(self, log: AuditLog, context_id: str, seq: int) -> None:
        raise NotImplementedError

    def remove(self, log: AuditLog, context_id: str, seq: int) -> None:
        raise NotImplementedError

    def rewrite(self, log: AuditLog, context_id: str, seq: int, data: dict[str, object], prev: str, hash: str) -> None:
        """Replace an entry's stored data, prev and hash, as someone with write access to the store would."""
        raise NotImplementedError

    @staticmethod
    def auditor(log: AuditLog) -> Auditor:
        return Auditor(log, FrozenClock(T0 + timedelta(days=1)), 365, CHAIN)

    def test_entries_chain_in_order_per_context(self, log: AuditLog) -> None:
        for i in range(5):
            log.append("c1", {"tool": f"t{i}", "objects": [f"o{i}"]}, T0 + timedelta(seconds=i), None, CHAIN)
        log.append("c2", {"tool": "other"}, T0, None, CHAIN)
        got = log.entries("c1")
        assert [e.seq for e in got] == [1, 2, 3, 4, 5] and got[0].prev == ""
        assert all(b.prev == a.hash for a, b in itertools.pairwise(got))
        assert all(e.hash == CHAIN.seal(e.context_id, e.seq, e.at, e.data, e.prev) for e in got)
        assert all(e.hash.startswith("k1:") and e.hash != legacy_seal(e.context_id, e.seq, e.at, e.data, e.prev)
                   for e in got)  # fmt: skip
        assert got[2].data == {"tool": "t2", "objects": ["o2"], "prev_expires_at": None}
        assert got[2].at == T0 + timedelta(seconds=2)
        assert [e.seq for e in log.entries("c1", after=1, before=5)] == [2, 3, 4]
        assert [e.seq for e in log.entries("c1", descending=True, limit=2)] == [5, 4]
        assert [e.seq for e in log.entries("c1", before=3, descending=True)] == [2, 1]
        assert [e.data["tool"] for e in log.entries("c2")] == ["other"] and log.entries("c3") == []
        assert self.auditor(log).verify("c1")["ok"] and self.auditor(log).verify("c1")["entries"] == 5

    def test_expired_entries_leave_the_chain_verifiable_from_the_oldest_kept(self, log: AuditLog) -> None:
        for i in range(4):
            log.append("c1", {"i": i}, T0 + timedelta(hours=i), T0 + timedelta(hours=i, minutes=30), CHAIN)
        later = T0 + timedelta(hours=1, minutes=45)  # the first two have expired
        assert [e.seq for e in log.entries("c1", now=later)] == [3, 4]
        assert [e.seq for e in log.entries("c1")] == [1, 2, 3, 4]  # without a time: whatever is stored
        report = Auditor(log, FrozenClock(later), 1, CHAIN).verify("c1")
        assert report["ok"] and (report["first"], report["last"], report["entries"]) == (3, 4, 2)

    def test_many_concurrent_writers_take_consecutive_numbers_and_one_chain(self, log: AuditLog) -> None:
        def write(i: int) -> None:
            for j in range(5):
                log.append("c1", {"writer": i, "n": j}, T0, None, CHAIN)

        assert together(16, write) == []
        got = log.entries("c1")
        assert [e.seq for e in got] == list(range(1, 81))
        assert sorted((e.data["writer"], e.data["n"]) for e in got) == [(i, j) for i in range(16) for j in range(5)]
        assert self.auditor(log).verify("c1")["ok"]

    def test_primed_appends_from_many_writers_in_two_contexts_keep_each_chain(self, log: AuditLog) -> None:
        """`prime` (a call began: read the head ahead) from every writer, racing the appends of others."""

        def write(i: int) -> None:
            for j in range(4):
                log.prime(f"p{i % 2}")
                log.append(f"p{i % 2}", {"writer": i, "n": j}, T0, None, CHAIN)

        assert together(12, write) == []
        for ctx in ("p0", "p1"):
            assert [e.seq for e in log.entries(ctx)] == list(range(1, 25))
            assert self.auditor(log).verify(ctx)["ok"]

    def test_an_altered_or_removed_entry_is_detected(self, log: AuditLog) -> None:
        for i in range(6):
            log.append("c1", {"tool": f"t{i}"}, T0, None, CHAIN)
        self.alter(log, "c1", 2)
        report = self.auditor(log).verify("c1")
        assert not report["ok"] and [p["seq"] for p in report["problems"]] == [2]
        self.remove(log, "c1", 4)
        report = self.auditor(log).verify("c1")
        assert [p["seq"] for p in report["problems"]] == [2, 5] and "missing" in report["problems"][1]["problem"]
        self.remove(log, "c1", 1)  # the first entry, inside its retention (none): a log cut at its start
        report = self.auditor(log).verify("c1")
        assert report["first"] == 2 and any(
            "removed inside their retention" in p["problem"] for p in report["problems"]
        )

    # -- #49: a chain nobody re-seals, cut at neither end --------------------------------------------------

    def _six(self, log: AuditLog, expires: timedelta | None = None, context_id: str = "c1") -> list[AuditEntry]:
        for i in range(6):
            log.append(context_id, {"tool": f"t{i}"}, T0 + timedelta(seconds=i),
                       T0 + timedelta(seconds=i) + expires if expires else None, CHAIN)  # fmt: skip
        return list(log.entries(context_id))

    def test_an_edit_resealed_with_the_published_algorithm_or_another_key_is_found(self, log: AuditLog) -> None:
        """The chain was keyless: edit an entry, re-seal it and every later one with SHA-256 as the module says
        (or any key but the deployment's), and `verify` said ok."""
        for ctx, forger in (("c1", legacy_seal), ("c2", Chain(lambda: b"a key that is not the deployment").seal)):
            entries = self._six(log, context_id=ctx)
            prev = entries[1].hash
            for e in entries[2:]:
                data = dict(e.data, tool="forged") if e.seq == 3 else e.data
                digest = forger(ctx, e.seq, e.at, data, prev)
                self.rewrite(log, ctx, e.seq, data, prev, digest)
                prev = digest
            report = self.auditor(log).verify(ctx)
            assert not report["ok"] and 3 in [p["seq"] for p in report["problems"]], report

    def test_a_log_cut_at_its_start_inside_retention_is_found_and_retention_is_not(self, log: AuditLog) -> None:
        self._six(log, expires=timedelta(days=30))
        self.remove(log, "c1", 1)
        self.remove(log, "c1", 2)  # the oldest entries, well inside their 30 days
        report = self.auditor(log).verify("c1")
        assert not report["ok"] and "removed inside their retention" in report["problems"][0]["problem"]
        later = Auditor(log, FrozenClock(T0 + timedelta(days=30, seconds=2)), 30, CHAIN)  # 1 and 2 expired
        assert later.verify("c1")["ok"], later.verify("c1")

    def test_a_log_cut_at_its_end_or_emptied_is_found_by_the_mark_kept_apart(self, log: AuditLog) -> None:
        entries = self._six(log, expires=timedelta(days=30))
        mark = log.mark("c1")
        assert mark is not None and (mark.seq, mark.hash) == (6, entries[-1].hash)
        self.remove(log, "c1", 6)
        report = self.auditor(log).verify("c1")
        assert not report["ok"] and "removed from the log's end" in report["problems"][-1]["problem"]
        for e in entries[:5]:
            self.remove(log, "c1", e.seq)
        report = self.auditor(log).verify("c1")  # every entry gone: the mark still names the sixth
        assert not report["ok"] and report["entries"] == 0, report
        after = Auditor(log, FrozenClock(T0 + timedelta(days=31)), 30, CHAIN)  # ... unless retention took them all
        assert after.verify("c1")["ok"]

    def test_the_next_entry_after_retention_took_every_one_goes_on_from_the_mark(self, log: AuditLog) -> None:
        self._six(log, expires=timedelta(hours=1))
        for seq in range(1, 7):  # the sweep (SQLite) or DynamoDB's TTL
            self.remove(log, "c1", seq)
        entry = log.append("c1", {"tool": "later"}, T0 + timedelta(days=2), None, CHAIN)
        assert entry.seq == 7
        assert Auditor(log, FrozenClock(T0 + timedelta(days=2)), 1, CHAIN).verify("c1")["ok"]
