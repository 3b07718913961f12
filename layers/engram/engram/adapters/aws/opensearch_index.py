"""SearchIndex on OpenSearch: an English-analysed `text` field for BM25 and a `knn_vector` (lucene HNSW,
cosine) for vectors, in one index shared by every context (`context_id` is a filter, never a scoring
input). Hybrid results are fused in Python by `engram.search_rules`, exactly as the embedded adapter
does, so both rank alike.

Filters follow `engram.search_rules.visible`: scope coverage (a tag equals the path or lies below
it), validity at `as_of`, metadata equality and ranges. Scores follow the port: BM25 as OpenSearch
computes it, cosine similarity for vectors (lucene reports (1 + cos) / 2; it is converted back).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engram.clock import iso
from engram.ports import Hit, IndexDoc, SearchQuery
from engram.search_rules import CANDIDATES, merge_hits, query_terms


class OpenSearchIndex:
    def __init__(self, client: Any, index: str, dim: int = 384, refresh: bool | str = "wait_for") -> None:
        self._os = client
        self._index = index
        self._dim = dim
        self._refresh = refresh  # OpenSearch Serverless takes no refresh: pass False there
        self._ready = False

    def ensure(self) -> None:
        self.ensure_index()

    def ensure_index(self) -> None:
        if self._ready or self._os.indices.exists(index=self._index):
            self._ready = True
            return
        self._os.indices.create(
            index=self._index,
            body={
                "settings": {"index": {"knn": True}},
                "mappings": {
                    "dynamic_templates": [
                        {
                            "meta_strings": {
                                "path_match": "metadata.*",
                                "match_mapping_type": "string",
                                "mapping": {"type": "keyword"},
                            }
                        },
                    ],
                    "properties": {
                        "context_id": {"type": "keyword"},
                        "kind": {"type": "keyword"},
                        "id": {"type": "keyword"},
                        "text": {"type": "text", "analyzer": "english"},
                        "scopes": {"type": "keyword"},
                        "valid_from": {"type": "date"},
                        "valid_until": {"type": "date"},
                        "metadata": {"type": "object", "dynamic": True},
                        "vector": {
                            "type": "knn_vector",
                            "dimension": self._dim,
                            "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"},
                        },
                    },
                },
            },
        )
        self._ready = True

    @staticmethod
    def _doc_id(context_id: str, id_: str) -> str:
        return f"{context_id}|{id_}"

    # -- writes ---------------------------------------------------------------------------

    def upsert(self, docs: Sequence[IndexDoc]) -> None:
        if not docs:
            return
        self.ensure_index()
        lines: list[dict[str, Any]] = []
        for d in docs:
            source: dict[str, Any] = {
                "context_id": d.context_id,
                "kind": d.kind,
                "id": d.id,
                "text": d.text,
                "scopes": list(d.scopes),
                "valid_from": iso(d.valid_from),
                "valid_until": iso(d.valid_until),
                "metadata": dict(d.metadata),
            }
            if d.vector is not None:
                source["vector"] = [float(x) for x in d.vector]
            lines += [{"index": {"_index": self._index, "_id": self._doc_id(d.context_id, d.id)}}, source]
        self._bulk(lines)

    def _bulk(self, lines: list[dict[str, Any]]) -> None:
        result = self._os.bulk(body=lines, refresh=self._refresh)
        if result.get("errors"):
            failed = [i for i in result["items"] if next(iter(i.values())).get("error")]
            raise RuntimeError(f"OpenSearch refused {len(failed)} of {len(result['items'])} bulk items")

    def delete(self, context_id: str, ids: Sequence[str]) -> None:
        if not ids:
            return
        self.ensure_index()
        self._os.bulk(
            body=[{"delete": {"_index": self._index, "_id": self._doc_id(context_id, i)}} for i in ids],
            refresh=self._refresh,
        )

    def set_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        self.ensure_index()
        self._os.update(
            index=self._index,
            id=self._doc_id(context_id, id),
            body={"doc": {"valid_until": iso(valid_until)}},
            refresh=self._refresh,
        )

    def count(self, context_id: str) -> int:
        self.ensure_index()
        return int(self._os.count(index=self._index, body={"query": {"term": {"context_id": context_id}}})["count"])

    # -- reads ----------------------------------------------------------------------------

    @staticmethod
    def _filters(q: SearchQuery, now: datetime) -> list[dict[str, Any]]:
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

    def _hits(self, response: dict[str, Any], cosine: bool) -> list[Hit]:
        hits = []
        for h in response["hits"]["hits"]:
            s = h["_source"]
            score = 2 * float(h["_score"]) - 1 if cosine else float(h["_score"])
            hits.append(Hit(s["id"], s["kind"], score, s["text"], s.get("metadata") or {}, s.get("scopes") or []))
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits

    def _bm25(self, q: SearchQuery, now: datetime, size: int) -> list[Hit]:
        terms = query_terms(q.text)
        if not terms:
            return []
        body = {
            "size": size,
            "_source": {"excludes": ["vector"]},
            "query": {
                "bool": {
                    "must": {"match": {"text": {"query": " ".join(terms), "operator": "and" if q.match_all else "or"}}},
                    "filter": self._filters(q, now),
                }
            },
        }
        return self._hits(self._os.search(index=self._index, body=body), cosine=False)

    def _vector(self, q: SearchQuery, now: datetime, size: int) -> list[Hit]:
        if q.vector is None:
            return []
        knn = {"vector": [float(x) for x in q.vector], "k": size, "filter": {"bool": {"filter": self._filters(q, now)}}}
        body = {"size": size, "_source": {"excludes": ["vector"]}, "query": {"knn": {"vector": knn}}}
        return self._hits(self._os.search(index=self._index, body=body), cosine=True)

    def search(self, query: SearchQuery, now: datetime) -> list[Hit]:
        k = max(0, query.k)
        if k == 0:
            return []
        self.ensure_index()
        pool = max(CANDIDATES, k) if query.mode == "hybrid" else k
        bm = self._bm25(query, now, pool) if query.mode != "vector" else []
        vec = self._vector(query, now, pool) if query.mode != "bm25" else []
        if query.mode == "hybrid" and query.match_all:
            keep = {h.id for h in bm}
            vec = [h for h in vec if h.id in keep]
        if query.mode == "hybrid":
            return merge_hits(bm, vec, query.fusion, k)
        return (bm if query.mode == "bm25" else vec)[:k]
