"""The knowledge family's search and answers: hybrid search over chunks (and records), answers with
citations, a document's neighbouring passages, a knowledge node."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from engram.families.entities import service as entities
from engram.families.entities.mentions import ends
from engram.families.knowledge import answering
from engram.families.knowledge.base import DocumentsBase
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, parse_time
from engram.kernel.errors import NotFound
from engram.kernel.ports import Hit, Progress, SearchMode, SearchQuery, no_progress, scan
from engram.kernel.scopes import can_see
from engram.search.rules import query_vector

# Whether a search answers one hit per document (its best chunk) or chunk hits (issue #25, bench/protocol.py)
PER_DOCUMENT = True
PASSAGES = 2  # a document hit's next best chunks, shown with it


@dataclass
class Search:
    query: str
    mode: str = "hybrid"
    k: int = 10
    offset: int = 0
    threshold: float | None = None
    collection: str | None = None
    folder_id: str | None = None
    doc_type: str | None = None
    mime_types: list[str] | None = None
    document_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_from: str | None = None
    created_to: str | None = None
    lens: list[list[str]] | None = None
    match_all: bool = False
    kinds: tuple[str, ...] = ("chunk",)  # Vectros' searches add "record": records whose indexMode is not none


class Answers(DocumentsBase):
    def search(self, caller: Caller, s: Search) -> dict[str, Any]:
        started = time.perf_counter()
        visibility = self.identity.read_lens(caller, s.lens)
        meta: dict[str, Any] = {f"m.{k}": v for k, v in s.metadata.items()}
        for key, value in (
            ("collection", s.collection),
            ("folder_id", s.folder_id),
            ("type", s.doc_type),
            ("document_id", s.document_id),
            ("mime_type", s.mime_types),
        ):
            if value:
                meta[key] = value
        ranges = {}
        if s.created_from or s.created_to:
            lo, hi = parse_time(s.created_from), parse_time(s.created_to)
            ranges["created_at"] = (iso(lo), iso(hi))
        # every mode embeds the query: a result's score weighs both kinds of evidence (search_rules.scored)
        vector = query_vector(self.embedder, s.query, ranks=s.mode != "bm25")
        mode: SearchMode = "vector" if s.mode == "vector" else "hybrid"
        if vector is None or s.mode == "bm25":
            mode = "bm25"
        query = SearchQuery(
            caller.context_id,
            s.query,
            vector,
            mode,
            s.k + s.offset,
            s.kinds,
            visibility,
            None,
            meta,
            ranges,
            s.match_all,
            group_by="document_id" if PER_DOCUMENT and s.document_id is None else None,
        )
        now = self.clock.now()
        hits = self.index.search(query, now)
        if query.group_by is not None and len(hits) < s.k + s.offset:
            # fewer documents than asked for: then further passages of the same documents, each by its own
            # score (distinct documents first, as #25 ranks them; a client with one long document gets its k)
            shown = {h.id for h in hits}
            more = self.index.search(replace(query, group_by=None), now)
            floor = hits[-1].score if hits else 1.0  # scores never rise down the list (the two lists' scales differ)
            hits += [h.scored(min(h.score, floor), h.lexical, h.semantic) for h in more if h.id not in shown][
                : s.k + s.offset - len(hits)
            ]
        hits = hits[s.offset :]
        if s.threshold is not None:
            hits = [h for h in hits if h.score >= s.threshold]
        return {
            "results": [self._result(caller, h) for h in hits],
            "search_mode": s.mode,
            "queryMs": round((time.perf_counter() - started) * 1000, 3),
        }

    def _result(self, caller: Caller, h: Hit) -> dict[str, Any]:
        m = h.metadata
        if h.kind == "record":  # a typed record (engram.families.records.service), in the same fields
            return {
                "kind": "record",
                "record": {"id": h.id, "type": m.get("type"), "externalId": m.get("external_id") or None},
                "chunk": {"id": h.id, "text": h.text, "section": "", "position": 0, "page": None},
                "score": round(h.score, 6),
                "chunk_id": h.id,
                "record_id": h.id,
                "document_id": None,
                "title": m.get("title"),
                "content": h.text,
                "metadata": {k[2:]: v for k, v in m.items() if k.startswith("m.")},
            }
        item = self.records.get(caller.context_id, "chunk", h.id)
        text = item.data["text"] if item is not None else h.text
        page = int(m.get("page", 0) or 0) or None
        user_meta = {k[2:]: v for k, v in m.items() if k.startswith("m.")}
        return {
            "chunk": {
                "id": h.id,
                "text": text,
                "section": m.get("section", ""),
                "position": m.get("position"),
                "page": page,
            },
            "score": round(h.score, 6),
            "document": {
                "id": m.get("document_id"),
                "title": m.get("title"),
                "source": m.get("source"),
                "collection": m.get("collection"),
                "mime_type": m.get("mime_type"),
            },
            "chunk_id": h.id,
            "document_id": m.get("document_id"),
            "title": m.get("title"),
            "content": text,
            "metadata": user_meta,
        } | ({"passages": self._passages(caller, h)} if h.passages else {})

    def _passages(self, caller: Caller, h: Hit) -> list[dict[str, Any]]:
        """A document hit's next best chunks (one hit per document), up to PASSAGES of them."""
        out = []
        for cid in h.passages[:PASSAGES]:
            item = self.records.get(caller.context_id, "chunk", cid)
            if item is not None:
                c = item.data
                out.append({"id": cid, "text": c["text"], "section": c["section"], "position": c["position"],
                            "page": c["page"]})  # fmt: skip
        return out

    def ask(
        self,
        caller: Caller,
        question: str,
        s: Search,
        instructions: str | None,
        temperature: float,
        progress: Progress = no_progress,
    ) -> dict[str, Any]:
        progress(0, 3, "retrieving passages")
        found = self.search(caller, s)["results"]
        progress(1, 3, "reading passages")
        result = answering.answer(question, found, self.generator, instructions, temperature)
        progress(3, 3, "done")
        return result

    def expand_neighbours(self, caller: Caller, results: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
        """hybrid_graph: follow the document structure from the top hits to their neighbouring chunks
        (position - 1 and + 1), scored at half their source's score."""
        seen = {r["chunk_id"] for r in results}
        extra: list[dict[str, Any]] = []
        for r in results[:3]:
            pos = r["chunk"]["position"]
            for neighbour in (pos - 1, pos + 1):
                cid = f"{r['chunk_id'][:-5]}{neighbour:05d}" if neighbour >= 0 else None
                if cid is None or cid in seen:
                    continue
                item = self.records.get(caller.context_id, "chunk", cid)
                if item is None:
                    continue
                seen.add(cid)
                c = item.data
                extra.append(
                    dict(
                        r,
                        chunk={
                            "id": cid,
                            "text": c["text"],
                            "section": c["section"],
                            "position": c["position"],
                            "page": c["page"],
                        },
                        chunk_id=cid,
                        content=c["text"],
                        score=round(r["score"] / 2, 6),
                        via=r["chunk_id"],
                    )
                )
        return sorted(results + extra, key=lambda r: -r["score"])[:k]

    def node(self, caller: Caller, kind: str, slug: str) -> dict[str, Any]:
        """A knowledge node: an entity by type and name, with the relations that start from it — each as
        the caller may see it (an entity by the scopes of what mentioned it, an edge by its own)."""
        ctx = caller.context_id
        visibility = self.identity.read_lens(caller, None)
        # Spectron's slugs: `jane_smith` or `jane-smith` name the entity of type Person named `jane smith`
        names = {slug.lower(), slug.replace("_", " ").replace("-", " ").lower()}
        typed = [i for i in scan(self.records, ctx, "entity") if str(i.data.get("type", "")).lower() == kind.lower()]
        item = next((i for i in typed if str(i.data.get("name", "")).lower() in names), None) or next(
            (i for i in typed if names & {str(a).lower() for a in i.data.get("aliases") or []}), None
        )  # by its name, else by an alias (a renamed entity keeps its old name as one)
        if item is not None and item.data.get("merged_into"):  # merged away: the entity it went into
            item = self.records.get(ctx, "entity", item.data["merged_into"])
        if item is None or not can_see(item.data.get("scopes"), visibility) or not entities.active(item.data):
            raise NotFound(f"node {kind}/{slug} not found")
        edges = []
        for rel in scan(self.records, ctx, "relation"):
            d = rel.data
            joined = ends(d)
            if item.id not in joined or not entities.current_edge(d) or not can_see(d.get("scopes"), visibility):
                continue
            edge = {"id": rel.id, "type": d["type"], "from": d["from"], "to": d["to"], "since": d.get("since"),
                    "direction": "outgoing" if joined[0] == item.id else "incoming",
                    "evidence": entities.evidence(d, visibility)}  # fmt: skip
            edges.append(edge)
        # no version: it counts the mentions of every scope, some of which the caller may not see
        return {"kind": "node", "node": entities.public(item, visibility), "edges": edges}
