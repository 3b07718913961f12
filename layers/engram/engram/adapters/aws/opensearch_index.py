"""SearchIndex on OpenSearch: a `text` field analysed and scored by the BM25 rules of `engram.search.rules`
(Snowball stems, stop words, k1 1.5) and a `knn_vector` (lucene HNSW,
cosine) for vectors, in one index shared by every context (`context_id` is a filter, never a scoring
input). Hybrid results are fused in Python by `engram.search.rules`, exactly as the embedded adapter
does, so both rank alike.

Filters follow `engram.search.filters.visible`: scope coverage (a tag equals the path or lies below
it), validity at `as_of`, metadata equality and ranges. Scores follow the port: BM25 as OpenSearch
computes it, cosine similarity for vectors (lucene reports (1 + cos) / 2; it is converted back).

OpenSearch Serverless (VECTORSEARCH collections) takes neither `refresh` nor documents with an `_id` of
ours, nor updates or deletes by query. With `custom_ids=False` every document carries its own `key`
(`context|id`) and OpenSearch picks the `_id`: a replace finds the key's `_id`s by a search, deletes them
in bulk, then indexes the new version; a validity change re-indexes the document. Serverless search is
eventually consistent (about 10 s), so a copy written moments before a replace can survive it for a
while: searches keep one hit per key (the newest), and the services read every hit's record before
returning it, so a stale or deleted copy is never shown.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from engram.adapters.aws.opensearch_queries import (
    COMPACT,
    Kept,
    bm25_body,
    counts_body,
    filters,
    term_counts_of,
    values_body,
    values_of,
    vector_body,
)
from engram.kernel.clock import iso, parse_time
from engram.kernel.ports import Closing, Hit, IndexDoc, SearchQuery, Vector
from engram.search.rules import DEFAULT, Rules, lists_of, query_weights
from engram.search.rules import search as run_search
from engram.search.terms import BM25_B, BM25_K1, STOP_WORDS

RETRY_STATUS = (429, 502, 503, 504)  # throttled or briefly unavailable: worth another try
RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8, 1.6)  # seconds before each retry (exponential backoff)
COUNT_TTL = 30.0  # seconds a context's document count is reused: it only picks a recall's tier
COMPACT_MAPPING = {COMPACT: {"type": "binary"}}  # not searchable, no doc values (the default): _source only


def pack(vector: Vector) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode()


def unpack(packed: str) -> Vector:
    return np.frombuffer(base64.b64decode(packed), dtype="<f2").astype(np.float32)


def _retryable(exc: Exception) -> bool:
    from opensearchpy.exceptions import ConnectionError as UnreachableError
    from opensearchpy.exceptions import ConnectionTimeout, TransportError

    if isinstance(exc, UnreachableError | ConnectionTimeout):
        return True
    return isinstance(exc, TransportError) and exc.status_code in RETRY_STATUS


class OpenSearchIndex:
    def __init__(
        self,
        client: Any,
        index: str,
        dim: int = 384,
        refresh: bool | str = "wait_for",
        custom_ids: bool = True,
        rules: Rules = DEFAULT,
    ) -> None:
        self.rules = rules  # how a hybrid search fuses its two lists
        self._os = client
        self._index = index
        self._dim = dim
        self._refresh = refresh  # OpenSearch Serverless takes no refresh: pass False there
        self._custom_ids = custom_ids  # False on OpenSearch Serverless vector collections
        self._ready = False
        self.sleep = time.sleep  # between retries (tests replace it)
        self.monotonic = time.monotonic
        self._counts: dict[str, tuple[float, int]] = {}  # context -> (when counted, documents)

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One request to OpenSearch, retried with backoff while it is throttled or unreachable."""
        for delay in (*RETRY_DELAYS, None):
            try:
                return fn(**kwargs)
            except Exception as exc:
                if delay is None or not _retryable(exc):
                    raise
                self.sleep(delay)
        raise AssertionError("unreachable")

    def ensure(self) -> None:
        if self._ready:
            return
        if self._call(self._os.indices.exists, index=self._index):
            # an index made before the compact copy existed gets its field (a no-op when it has it)
            self._call(self._os.indices.put_mapping, index=self._index, body={"properties": COMPACT_MAPPING})
            self._ready = True
            return
        self._call(
            self._os.indices.create,
            index=self._index,
            body={
                "settings": {
                    # BM25 and text analysis as engram.search.rules defines them (the embedded index too)
                    "index": {"knn": True, "similarity": {"default": {"type": "BM25", "k1": BM25_K1, "b": BM25_B}}},
                    "analysis": {
                        "filter": {
                            "engram_stop": {"type": "stop", "stopwords": sorted(STOP_WORDS)},
                            "engram_stem": {"type": "snowball", "language": "English"},
                        },
                        "analyzer": {
                            "engram": {
                                "type": "custom",
                                "tokenizer": "standard",
                                "filter": ["lowercase", "engram_stop", "engram_stem"],
                            }
                        },
                    },
                },
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
                        "key": {"type": "keyword"},
                        "indexed_at": {"type": "long"},
                        "text": {"type": "text", "analyzer": "engram"},
                        "scopes": {"type": "keyword"},
                        "valid_from": {"type": "date"},
                        "valid_until": {"type": "date"},
                        "metadata": {"type": "object", "dynamic": True},
                        "vector": {
                            "type": "knn_vector",
                            "dimension": self._dim,
                            "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil"},
                        },
                        **COMPACT_MAPPING,
                    },
                },
            },
        )
        self._ready = True

    @staticmethod
    def _doc_id(context_id: str, id_: str) -> str:
        return f"{context_id}|{id_}"

    # -- writes ---------------------------------------------------------------------------

    def upsert(self, docs: Sequence[IndexDoc], closing: Sequence[Closing] = ()) -> None:
        self._wrote([d.context_id for d in docs])
        if not docs:
            for context_id, id_, until in closing:
                self.set_validity(context_id, id_, until)
            return
        self.ensure()
        now = time.time_ns() // 1_000_000
        sources: list[dict[str, Any]] = []
        for d in docs:
            source: dict[str, Any] = {
                "context_id": d.context_id,
                "kind": d.kind,
                "id": d.id,
                "key": self._doc_id(d.context_id, d.id),
                "indexed_at": now,
                "text": d.text,
                "scopes": list(d.scopes),
                "valid_from": iso(d.valid_from),
                "valid_until": iso(d.valid_until),
                "metadata": dict(d.metadata),
            }
            if d.vector is not None:
                source["vector"] = [float(x) for x in d.vector]
                source[COMPACT] = pack(d.vector)
            sources.append(source)
        self._index_sources(sources, closing)

    def _index_sources(self, sources: list[dict[str, Any]], closing: Sequence[Closing] = ()) -> None:
        lines: list[dict[str, Any]] = []
        if self._custom_ids:
            for source in sources:
                lines += [{"index": {"_index": self._index, "_id": source["key"]}}, source]
            for context_id, id_, until in closing:  # the validity updates ride in the same bulk request
                lines += [
                    {"update": {"_index": self._index, "_id": self._doc_id(context_id, id_)}},
                    {"doc": {"valid_until": iso(until)}},
                ]
        else:
            self._drop([s["key"] for s in sources])
            for source in sources:
                lines += [{"index": {"_index": self._index}}, source]
        self._bulk(lines, missing_ok=True)
        if not self._custom_ids:
            for context_id, id_, until in closing:
                self.set_validity(context_id, id_, until)

    def _refresh_param(self) -> dict[str, Any]:
        """How a write becomes searchable; nothing at all where refresh is off (Serverless takes none)."""
        return {"refresh": self._refresh} if self._refresh is not False else {}

    def _found(self, keys: Sequence[str], source: bool) -> list[dict[str, Any]]:
        """The stored copies of `keys` (OpenSearch's `_id`, and the source when asked for)."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), 500):
            part = list(keys[start : start + 500])
            body = {"size": 10 * len(part), "_source": source, "query": {"terms": {"key": part}}}
            found += self._call(self._os.search, index=self._index, body=body)["hits"]["hits"]
        return found

    def _drop(self, keys: Sequence[str]) -> None:
        """Delete every stored copy of `keys` (Serverless: by the `_id`s OpenSearch gave them)."""
        if not keys:
            return
        ids = [h["_id"] for h in self._found(keys, source=False)]
        if ids:
            self._bulk([{"delete": {"_index": self._index, "_id": i}} for i in ids], missing_ok=True)

    def _bulk(self, lines: list[dict[str, Any]], missing_ok: bool = False) -> None:
        for delay in (*RETRY_DELAYS, None):
            result = self._call(self._os.bulk, body=lines, **self._refresh_param())
            items = [next(iter(i.values())) for i in result.get("items", [])] if result.get("errors") else []
            if delay is None or not items or not all(r.get("status") in RETRY_STATUS for r in items if r.get("error")):
                break
            self.sleep(delay)  # the whole bulk was throttled: send it again (its actions are idempotent)
        if result.get("errors"):
            failed = [
                i
                for i in result["items"]
                if (r := next(iter(i.values()))).get("error") and not (missing_ok and r.get("status") == 404)
            ]
            if failed:
                first = next(iter(failed[0].values())).get("error")
                reason = first.get("reason") if isinstance(first, dict) else first
                raise RuntimeError(
                    f"OpenSearch refused {len(failed)} of {len(result['items'])} bulk items "
                    f"(first: {str(reason)[:300]})"
                )

    def delete(self, context_id: str, ids: Sequence[str]) -> None:
        self._wrote([context_id])
        if not ids:
            return
        self.ensure()
        if not self._custom_ids:
            self._drop([self._doc_id(context_id, i) for i in ids])
            return
        self._bulk([{"delete": {"_index": self._index, "_id": self._doc_id(context_id, i)}} for i in ids], True)

    def expunge(self) -> None:
        """Deleted documents merged out of the index's segments (until then a segment keeps them, marked)."""
        self.ensure()
        self._call(self._os.indices.forcemerge, index=self._index, params={"only_expunge_deletes": "true"})

    def set_validity(self, context_id: str, id: str, valid_until: datetime | None) -> None:
        self.ensure()
        key = self._doc_id(context_id, id)
        if not self._custom_ids:  # no partial updates: index the document again
            copies = sorted(self._found([key], source=True), key=lambda h: -int(h["_source"].get("indexed_at", 0)))
            if copies:
                self._index_sources([dict(copies[0]["_source"], valid_until=iso(valid_until))])
            return
        body = {"doc": {"valid_until": iso(valid_until)}}
        self._call(self._os.update, index=self._index, id=key, body=body, **self._refresh_param())

    def generation(self, context_id: str) -> int | None:
        """Writers are other Lambda instances and OpenSearch keeps no cheap change counter: unknown, so
        no search result is cached (read-your-writes across instances)."""
        return None

    def count(self, context_id: str) -> int:
        """The context's documents, asked at most every COUNT_TTL seconds (a recall asks each time, to
        pick its tier); a write through this index asks again at once. Another process's writes show
        within COUNT_TTL."""
        now = self.monotonic()
        known = self._counts.get(context_id)
        if known is not None and now - known[0] < COUNT_TTL:
            return known[1]
        self.ensure()
        body = {"query": {"term": {"context_id": context_id}}}
        n = int(self._call(self._os.count, index=self._index, body=body)["count"])
        self._counts[context_id] = (now, n)
        return n

    def _wrote(self, contexts: Iterable[str]) -> None:
        for context_id in set(contexts):
            self._counts.pop(context_id, None)

    # -- reads ----------------------------------------------------------------------------

    def _hits(self, response: dict[str, Any], cosine: bool, keep: Kept | None = None) -> list[Hit]:
        """The hits of a search response, best first; with `keep`, their vectors are kept there too."""
        hits = []
        newest: dict[str, int] = {}  # Serverless: a replaced copy can linger; keep the newest per key
        for h in response["hits"]["hits"]:
            key = h["_source"].get("key") or h["_id"]
            newest[key] = max(newest.get(key, 0), int(h["_source"].get("indexed_at") or 0))
        seen: set[str] = set()
        for h in response["hits"]["hits"]:
            s = h["_source"]
            key = s.get("key") or h["_id"]
            if key in seen or int(s.get("indexed_at") or 0) < newest[key]:
                continue
            seen.add(key)
            score = 2 * float(h["_score"]) - 1 if cosine else float(h["_score"])
            hits.append(Hit(s["id"], s["kind"], score, s["text"], s.get("metadata") or {}, s.get("scopes") or []))
            if keep is not None:
                keep[s["id"]] = unpack(s[COMPACT]) if s.get(COMPACT) else None
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits

    def _msearch(self, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The responses of several searches sent as one request; a failed one raises as its own request
        would (so a throttled one is retried with the rest)."""
        from opensearchpy.exceptions import TransportError

        lines: list[dict[str, Any]] = []
        for body in bodies:
            lines += [{}, body]
        responses: list[dict[str, Any]] = self._os.msearch(index=self._index, body=lines)["responses"]
        for r in responses:
            if "error" in r:
                error = r["error"]
                raise TransportError(int(r.get("status") or 500), str(error.get("type", error)), error)
        return responses

    def vectors(self, context_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The compact copies (half precision); the full vector of a document indexed before they existed."""
        found = {i: unpack(v) for i, v in self._sources(context_id, ids, COMPACT).items()}
        missing = [i for i in ids if i not in found]
        if missing:
            full = self._sources(context_id, missing, "vector")
            found |= {i: np.asarray(v, dtype=np.float32) for i, v in full.items()}
        return found

    def documents(self, context_id: str, after: str | None, limit: int) -> list[IndexDoc]:
        """By `key` (context|id); of several copies of one (Serverless: no ids of ours), the newest."""
        self.ensure()
        out: dict[str, IndexDoc] = {}
        mark: list[Any] | None = [self._doc_id(context_id, after), 2**62] if after is not None else None
        while len(out) < limit:
            body: dict[str, Any] = {
                "size": min(1000, 2 * limit),
                "query": {"bool": {"filter": [{"term": {"context_id": context_id}}]}},
                "sort": [{"key": "asc"}, {"indexed_at": "desc"}],
                "_source": {"excludes": [COMPACT]},
            }
            if mark is not None:
                body["search_after"] = mark
            hits = self._call(self._os.search, index=self._index, body=body)["hits"]["hits"]
            for h in hits:
                src = h["_source"]
                if src["id"] in out or (after is not None and src["id"] <= after):
                    continue
                vector = src.get("vector")
                out[src["id"]] = IndexDoc(
                    context_id, src["kind"], src["id"], src["text"],
                    None if vector is None else np.asarray(vector, dtype=np.float32), tuple(src.get("scopes") or ()),
                    parse_time(src.get("valid_from")), parse_time(src.get("valid_until")), src.get("metadata") or {},
                )  # fmt: skip
                if len(out) == limit:
                    break
            if len(hits) < body["size"]:
                break
            mark = hits[-1]["sort"]
        return list(out.values())

    def term_counts(self, context_id: str, stems: Sequence[str]) -> tuple[int, Mapping[str, int]]:
        self.ensure()
        body = counts_body([{"term": {"context_id": context_id}}], stems)
        return term_counts_of(self._call(self._os.search, index=self._index, body=body), stems)

    def values(self, query: SearchQuery, key: str, now: datetime, most: int) -> dict[str, int] | None:
        self.ensure()
        return values_of(self._call(self._os.search, index=self._index, body=values_body(query, now, key, most)), most)

    def _sources(self, context_id: str, ids: Sequence[str], field: str) -> dict[str, Any]:
        """id -> `field` of those of `ids` in the context that have it."""
        if not ids:
            return {}
        body = {
            "size": len(ids),
            "_source": ["id", field],
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"context_id": context_id}},
                        {"terms": {"id": list(ids)}},
                        {"exists": {"field": field}},
                    ]
                }
            },
        }
        hits = self._call(self._os.search, index=self._index, body=body)["hits"]["hits"]
        return {h["_source"]["id"]: h["_source"][field] for h in hits if h["_source"].get(field)}

    def search(self, query: SearchQuery, now: datetime) -> list[Hit]:
        """One query through `engram.search.rules.search`. A hybrid round asks both lists in one request,
        and its hits come with their compact vectors (in any mode, when the query has a vector), so
        feedback, smoothing and scores need no request of their own: a hit the rounds returned without one
        (no vector yet, or written before compact copies existed, until it is written again) counts as
        having none. The term counts the scores are weighed with (within the query's filters) ride in the first
        request."""
        self.ensure()
        keep: Kept | None = {} if query.vector is not None else None  # vectors come with the hits
        stems = list(query_weights(query.text))
        counted: list[tuple[int, dict[str, int]]] = []
        seen = replace(query, kinds=None)  # what the counts are within: its filters, its kinds aside (as locally)

        def ask(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
            """The answers to `bodies`, in one request; the first of a search also brings the term counts."""
            extra = [] if counted or not stems else [counts_body(filters(seen, now), stems)]
            if len(bodies) + len(extra) == 1:
                return [self._call(self._os.search, index=self._index, body=bodies[0])]
            answers: list[dict[str, Any]] = self._call(self._msearch, bodies=[*bodies, *extra])
            if extra:
                counted.append(term_counts_of(answers.pop(), stems))
            return answers

        def counts(_: str, wanted: Sequence[str]) -> tuple[int, Mapping[str, int]]:
            """Within the query's filters, its kinds aside (what it may see), as the local index's BM25 statistics."""
            if counted and list(wanted) == stems:
                return counted[0]
            body = counts_body(filters(seen, now), wanted)
            return term_counts_of(self._call(self._os.search, index=self._index, body=body), wanted)

        def vectors_of(ids: Sequence[str]) -> dict[str, Vector]:
            seen = keep if keep is not None else {}
            known = {i: v for i in ids if (v := seen.get(i)) is not None}
            unseen = [i for i in ids if i not in seen]
            return known | (self.vectors(query.context_id, unseen) if unseen else {})

        def bm25(weights: Mapping[str, float], n: int) -> list[Hit]:
            return self._hits(ask([bm25_body(query, now, weights, n, keep)])[0], False, keep)

        def vector(v: Vector, n: int) -> list[Hit]:
            return self._hits(ask([vector_body(query, now, v, n, keep)])[0], True, keep)

        def both(weights: Mapping[str, float], v: Vector | None, n: int) -> tuple[Sequence[Hit], Sequence[Hit]]:
            if weights and v is not None:
                bodies = [bm25_body(query, now, weights, n, keep), vector_body(query, now, v, n, keep)]
                bm_answer, vec_answer = ask(bodies)
                return self._hits(bm_answer, False, keep), self._hits(vec_answer, True, keep)
            return lists_of(bm25, vector)(weights, v, n)  # one list only: a plain search

        return run_search(query, bm25, vector, vectors_of, counts, both, rules=self.rules)
