from engram.search_rules import fuse, query_terms, rrf


def test_fuse_normalises_and_combines() -> None:
    out = fuse([("a", 10.0), ("b", 5.0), ("c", 0.0)], [("b", 0.9), ("c", 0.5), ("a", 0.1)])
    assert [i for i, _ in out][:1] == ["b"]  # b: 0.5*0.5 + 0.5*1.0 beats a: 0.5*1 + 0
    assert all(0.0 <= s <= 1.0 for _, s in out)


def test_fuse_keeps_entries_of_one_list_only() -> None:
    out = dict(fuse([("a", 3.0)], [("b", 0.8), ("c", 0.2)]))
    assert set(out) == {"a", "b", "c"} and out["c"] == 0.0


def test_rrf_orders_by_reciprocal_rank() -> None:
    assert [i for i, _ in rrf([("a", 1), ("b", 1)], [("b", 1), ("a", 1)])] == ["a", "b"]  # tie breaks by id


def test_query_terms_drop_stop_words_and_duplicates() -> None:
    assert query_terms("What does Alice do at Acme, Alice?") == ["alice", "acme"]
