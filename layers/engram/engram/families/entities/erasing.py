"""The entities family's eraser (`engram.trust.erasure`): what a subject's objects fed the graph.

An entity or an edge is a set of parts (`engram.kernel.parts`): per scope set, what that set's writers said of it
(memory's `mentions` and `minfo`, the graph's `gm` and `ev`, callers' `edits`, `first`). The subject's parts go
(a set is the subject's when any of its paths is; for a subject named by ids, the parts inside the asking key's
grant: `Subject.owns_part`), and with an editing set what callers wrote into it (never left to speak for the
erased one under the scopes that remain); an entity or an edge nobody else speaks of goes whole — record, every
version, index document, spellings — and one that others speak of keeps their part, its older versions (which
quote the subject) squashed away. The graph's bookkeeping of the subject's sources goes too: each source's record
of what it said, and its mention and evidence marks. Memory's edges (`rel:`) belong to the turn that stated them.

Order, so that a rerun finds what is left: marks and source records first (found by their own scopes), then
edges, then entities (an entity's index document before its record).


Its reindexer (`reindex`, `engram.search.reindex`) names the jobs that index the family's objects
again from the store."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

from engram.families.entities import INDEX_JOB
from engram.families.entities.graph import EVIDENCE, MENTION, SOURCE
from engram.families.entities.mentions import entity_text, fold, index_doc
from engram.kernel.parts import without
from engram.kernel.ports import Item, Write
from engram.kernel.retry import on_conflict
from engram.kernel.scan import every
from engram.kernel.services import BaseService
from engram.search.reindex import Keep, Reindex, by_ids
from engram.trust.erasure import BATCH, Counts, Subject, Unit, add


def _without(subject: Subject, data: dict[str, Any]) -> tuple[dict[str, Any], list[str], bool]:
    """(the data without the subject's parts, the scopes left, whether anything was the subject's)."""
    return without(data, subject.owns_part)


class EntityErasing(BaseService):
    def reindex(self, ctx: str, keep: Keep) -> Iterator[Reindex]:
        """The kept entities indexed again (`engram.search.reindex`): a dormant or merged one taken out."""
        return by_ids(INDEX_JOB, self.records, ctx, "entity", keep)

    def erase(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        yield from self._marks(ctx, subject)
        yield from self._shared(ctx, "relation", subject, {})
        yield from self._shared(ctx, "entity", subject, self._spellings(ctx))

    def _spellings(self, ctx: str) -> dict[str, list[Item]]:
        """Every entity's spellings (`ealias` records), read in one pass (not one pass an entity)."""
        out: dict[str, list[Item]] = {}
        for alias in every(self.records, ctx, "ealias"):
            out.setdefault(str(alias.data.get("entity")), []).append(alias)
        return out

    def _marks(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        """The graph's records of the subject's sources: what each said, and its mention and evidence marks."""
        if subject.ids:  # sources named by id: the graph takes back what each said, as when a source is deleted
            yield from self._sources_gone(ctx, subject)
            return
        sources = {s.id for s in every(self.records, ctx, SOURCE) if subject.owns(s.data.get("scopes"))}
        mentions = [m.id for m in every(self.records, ctx, MENTION) if subject.owns(m.data.get("scopes"))]
        evidence = [v.id for v in every(self.records, ctx, EVIDENCE) if v.data.get("source") in sources]
        for kind, ids in ((MENTION, mentions), (EVIDENCE, evidence), (SOURCE, sorted(sources))):
            for start in range(0, len(ids), BATCH):
                batch = ids[start : start + BATCH]
                yield Unit({"records": {kind: len(batch)}}, partial(self.records.purge_many, ctx, kind, batch))

    def _sources_gone(self, ctx: str, subject: Subject) -> Iterator[Unit]:
        spellings = self._spellings(ctx)
        for source in list(every(self.records, ctx, SOURCE)):
            if source.id.partition(":")[2] not in subject.ids:
                continue
            said = (source.data.get("mentions") or [], source.data.get("relations") or [])
            counts = {"records": {SOURCE: 1, MENTION: len(said[0]), EVIDENCE: len(said[1])}}
            yield Unit(counts, partial(self._unsay, ctx, source.id, said, spellings))

    def _unsay(
        self, ctx: str, source_id: str, said: tuple[list[str], list[str]], spellings: dict[str, list[Item]]
    ) -> None:
        from engram.families.entities.graph import GraphService

        GraphService(self.kernel).extract(ctx, source_id, gone=True)
        for kind, ids, unsaid in (("entity", said[0], "dormant"), ("relation", said[1], "retracted")):
            for id_ in ids:
                item = self.records.get(ctx, kind, id_)
                if item is not None and item.data.get(unsaid) and not item.data.get("edited"):
                    self._whole_unit(ctx, kind, id_, spellings).step()  # only the erased source spoke of it
                elif item is not None:
                    self.records.squash(ctx, kind, id_)  # its older versions quoted the source

    def _shared(self, ctx: str, kind: str, subject: Subject, spellings: dict[str, list[Item]]) -> Iterator[Unit]:
        for item in list(every(self.records, ctx, kind)):
            if subject.ids and not subject.takes(item):
                continue  # named by id: the asker's parts of it (`Subject.owns_part`), the others' left whole
            _, left, touched = _without(subject, item.data)
            if not touched:
                continue
            if not left:  # nobody else speaks of it: it goes whole
                yield self._whole_unit(ctx, kind, item.id, spellings)
                continue
            versions = self.records.version_counts(ctx, kind, [item.id]).get(item.id, 0)
            counts = {"changed": {kind: 1}, "versions": {kind: max(0, versions - 1)}}
            yield Unit(counts, partial(self._keep_theirs, ctx, kind, item.id, subject, spellings.get(item.id, [])))

    def _whole_unit(self, ctx: str, kind: str, id_: str, spellings: dict[str, list[Item]]) -> Unit:
        """An entity or an edge, every version; an entity's index document and spellings too."""
        versions = self.records.version_counts(ctx, kind, [id_]).get(id_, 0)
        counts: Counts = {"records": {kind: 1}, "versions": {kind: versions}}
        aliases: list[str] = []
        if kind == "entity":
            aliases = [a.id for a in spellings.get(id_, [])]
            add(counts, {"index": {kind: 1}, "records": {"ealias": len(aliases)}})
        return Unit(counts, lambda: self._whole(ctx, kind, id_, aliases))

    def _whole(self, ctx: str, kind: str, id_: str, aliases: list[str]) -> None:
        if kind == "entity":
            self.index.delete(ctx, [id_])
            self.records.purge_many(ctx, "ealias", aliases)
        self.records.purge(ctx, kind, id_)

    def _keep_theirs(self, ctx: str, kind: str, id_: str, subject: Subject, spellings: list[Item]) -> None:
        """Another scope's part stays: the record without the subject's, then its older versions gone."""

        def attempt() -> dict[str, Any] | None:
            item = self.records.get(ctx, kind, id_)
            if item is None:
                return None
            data, left, _ = _without(subject, item.data)
            data["scopes"] = left
            self.records.transact([Write(ctx, kind, id_, data, "erasure", item.version)], self.clock.now())
            return data

        data = on_conflict(attempt)
        if data is None:
            return
        if kind == "entity":  # spellings only the subject's sources used
            said = {fold(str(data.get("name", "")))} | {fold(a) for a in data.get("aliases") or []}
            said |= {fold(a) for e in (data.get("gm") or {}).values() for a in e.get("aliases") or {}}
            for alias in spellings:
                if fold(str(alias.data.get("alias", ""))) not in said:
                    self.records.purge(ctx, "ealias", alias.id)
        if kind == "entity" and not data.get("dormant") and not data.get("merged_into"):
            doc = index_doc(ctx, id_, data)
            vector = self.embedder.embed([entity_text(data)])[0] if self.embedder is not None else None
            self.index.upsert([doc.with_vector(vector)])
        self.records.squash(ctx, kind, id_)
