"""The OpenSearch query DSL Engram sends (`opensearch_index`): the filters every search carries (tenant, kinds,
scopes, validity, metadata), BM25 over weighted stems, k-NN, and the term counts of a context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engram.kernel.clock import iso
from engram.kernel.ports import SearchQuery, Vector

# A compact copy of each vector (half precision, base64) that searches return instead of the JSON array of
# floats (~1 KB against ~8 KB a hit): feedback and smoothing read it. Stored only, never searched.
COMPACT = "vector16"

Kept = dict[str, "Vector | None"]
"""id -> the compact vector a search's hit came with (None: it came with none), for one search."""


def filters(q: SearchQuery, now: datetime) -> list[dict[str, Any]]:
    at = iso(q.as_of or now)
    out: list[dict[str, Any]] = [
        {"term": {"context_id": q.context_id}},
        {
            "bool": {
                "should": [
                    {"bool": {"must_not": {"exists": {"field": "valid_from"}}}},
                    {"range": {"valid_from": {"lte": at}}},
                ],
                "minimum_should_match": 1,
            }
        },
        {
            "bool": {
                "should": [
                    {"bool": {"must_not": {"exists": {"field": "valid_until"}}}},
                    {"range": {"valid_until": {"gt": at}}},
                ],
                "minimum_should_match": 1,
            }
        },
    ]
    if q.kinds is not None:
        out.append({"terms": {"kind": list(q.kinds)}})
    if q.visibility is not None:
        clauses = [
            {
                "bool": {
                    "must": [
                        {
                            "bool": {
                                "should": [{"term": {"scopes": p}}, {"prefix": {"scopes": p + "/"}}],
                                "minimum_should_match": 1,
                            }
                        }
                        for p in clause
                    ]
                }
            }
            for clause in q.visibility
        ]
        out.append({"bool": {"should": clauses, "minimum_should_match": 1}})
    for key, want in q.metadata.items():
        values = list(want) if isinstance(want, list | tuple) else [want]
        out.append({"terms": {f"metadata.{key}": values}})
    for key, (lo, hi) in q.ranges.items():
        bounds = {k: v for k, v in (("gte", lo), ("lte", hi)) if v is not None}
        out.append({"range": {f"metadata.{key}": bounds}})
    return out


def source(keep: Kept | None) -> dict[str, Any]:
    return {"_source": {"excludes": ["vector"] if keep is not None else ["vector", COMPACT]}}


def bm25_body(
    q: SearchQuery, now: datetime, weights: Mapping[str, float], size: int, keep: Kept | None
) -> dict[str, Any]:
    """BM25 over the query's stems (the index analyses documents to the same stems), each clause
    boosted by its weight; with match_all every term must occur."""
    clauses = [{"term": {"text": {"value": t, "boost": w}}} for t, w in weights.items()]
    return {
        "size": size,
        **source(keep),
        "query": {
            "bool": {
                "should": clauses,
                "minimum_should_match": len(clauses) if q.match_all else 1,
                "filter": filters(q, now),
            }
        },
    }


def vector_body(q: SearchQuery, now: datetime, vector: Vector, size: int, keep: Kept | None) -> dict[str, Any]:
    knn = {"vector": [float(x) for x in vector], "k": size, "filter": {"bool": {"filter": filters(q, now)}}}
    return {"size": size, **source(keep), "query": {"knn": {"vector": knn}}}


def counts_body(kept: list[dict[str, Any]], stems: Sequence[str]) -> dict[str, Any]:
    """The documents `kept` keeps (a query's `filters`, or a context's term) and a filter aggregation per stem: one
    search, no hits."""
    return {
        "size": 0,
        "track_total_hits": True,
        "query": {"bool": {"filter": kept}},
        "aggs": {f"t{n}": {"filter": {"term": {"text": t}}} for n, t in enumerate(stems)},
    }


def values_body(q: SearchQuery, now: datetime, key: str, most: int) -> dict[str, Any]:
    """`SearchIndex.values`: how many documents the query's filters keep, and each value of `key` among them."""
    return {
        "size": 0,
        "track_total_hits": most + 1,
        "query": {"bool": {"filter": filters(q, now)}},
        "aggs": {
            "v": {"terms": {"field": f"metadata.{key}", "size": most, "order": [{"_count": "desc"}, {"_key": "asc"}]}}
        },
    }


def values_of(answer: dict[str, Any], most: int) -> dict[str, int] | None:
    total = answer["hits"]["total"]
    if int(total["value"] if isinstance(total, dict) else total) > most:
        return None
    buckets = (answer.get("aggregations") or {}).get("v", {}).get("buckets", [])
    return {b["key"]: int(b["doc_count"]) for b in buckets if isinstance(b.get("key"), str)}


def term_counts_of(answer: dict[str, Any], stems: Sequence[str]) -> tuple[int, dict[str, int]]:
    aggs = answer.get("aggregations") or {}
    total = answer["hits"]["total"]
    docs = int(total["value"] if isinstance(total, dict) else total)
    return docs, {t: int(aggs.get(f"t{n}", {}).get("doc_count", 0)) for n, t in enumerate(stems)}
