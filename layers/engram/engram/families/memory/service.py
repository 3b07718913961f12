"""The memory family's domain logic (Spectron's memory tools): store, reflect and forget here; recall and the
profile in `reading`, the write plan and index documents in `plan`, result shapes in `results`.

Storage model, all in the caller's context:
- `turn` items: what was said, by whom, in which session, when said (`said_at`) and recorded.
- `attribute` items: one value of one key of one subject, with valid_from / valid_until. A slot item
  (`slot`) points at the current attribute of a single-valued key; superseding closes the old
  attribute (valid_until = when the new value was said) and keeps it.
- `entity`, `relation`, `session` items. Every write goes through `RecordStore.transact`.
Turns and attributes are indexed for hybrid search with their scope tags and validity.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from engram.families.entities import mentions as entities
from engram.families.entities import tagger
from engram.families.memory import EXPIRE_JOB
from engram.families.memory.base import _RETRIES, CONTEXT_EMBEDDING, FORGET_COSINE, Turn, _slug, in_context
from engram.families.memory.erasing import Erasing
from engram.families.memory.extraction import SINGLE_VALUED, Extraction, Fact
from engram.families.memory.plan import (
    ATTRIBUTE_EDGES,
    Plan,
    attribute_text,
    index_doc,
    index_doc_of,
    session_key,
    touch_session,
    turn_text,
)
from engram.families.memory.reading import Reading
from engram.kernel.caller import OVERSEERS, Caller
from engram.kernel.clock import iso, new_id
from engram.kernel.errors import Conflict
from engram.kernel.ports import Hit, Progress, SearchQuery, Vector, no_progress
from engram.kernel.scopes import tags_key
from engram.search.rules import semantic_evidence
from engram.search.terms import query_terms

__all__ = ["CONTEXT_EMBEDDING", "MemoryService", "Turn"]


class MemoryService(Reading, Erasing):
    # -- store ----------------------------------------------------------------------------

    def store(self, caller: Caller, turn: Turn, scopes: list[list[str]] | None) -> dict[str, Any]:
        return self.store_many(caller, [turn], scopes)[0]

    def store_many(self, caller: Caller, turns: Sequence[Turn], scopes: list[list[str]] | None) -> list[dict[str, Any]]:
        """Store turns in order, all of them or none — within what one transaction of the record store
        can hold. Where transactions are capped (DynamoDB: 50 writes) a larger batch is committed as
        consecutive groups of turns, each all-or-nothing and each seeing the ones before it."""
        tags = self.identity.write_scopes(caller, scopes)
        return self._store_group(caller, list(turns), tags, self.clock.now())

    def _store_group(self, caller: Caller, turns: list[Turn], tags: list[str], now: datetime) -> list[dict[str, Any]]:
        # Writers of one context take turns in this process (appending to a session is a read-modify-write
        # of its record); writers in other processes are met by the version check and retried, with jitter.
        # A conflict plans again from what is now stored; the embeddings of the same texts are kept (the slow
        # part), so many concurrent writers of one entity or session cost a re-read each, not a re-embedding.
        memo: dict[str, Vector | None] = {}
        learned: dict[tuple[str, int], tagger.Found] = {}
        reader = getattr(self.embedder, "embed_with_states", None) if self.embedder and self.learned else None
        extractor = tagger.shipped() if reader is not None else None

        def embed(texts: Sequence[str]) -> list[Vector | None]:
            missing = [t for t in dict.fromkeys(texts) if t not in memo]
            if missing:
                memo.update(zip(missing, self.embed(missing), strict=True))
            return [memo[t] for t in texts]

        def read(pending: Sequence[tuple[str, int]]) -> list[tagger.Found]:
            """The learned extractor's reading of each (embedded text, where the turn's own words start), from
            the pass that embeds the text: its vector is kept for the index, so no text is encoded twice."""
            missing = [p for p in dict.fromkeys(pending) if p not in learned]
            if missing and (reader is None or extractor is None):
                learned.update((p, tagger.NOTHING) for p in missing)
            elif missing and reader is not None and extractor is not None:
                texts = list(dict.fromkeys(t for t, _ in missing))
                vectors, states = reader(texts)
                memo.update(zip(texts, vectors, strict=True))
                by_text = dict(zip(texts, states, strict=True))
                for text, start in missing:
                    offsets, pieces = by_text[text]
                    learned[(text, start)] = tagger.found(extractor, text, offsets, pieces, start)
            return [learned[p] for p in pending]

        # When another writer of the context has the turn, the slow part (embedding the turns, reading their names)
        # runs while it waits, from a plan of what is stored now: in turn, planned again, only a text another writer
        # changed meanwhile (a turn before it in the same session) is embedded there — stores no longer queue behind
        # each other's embedding (#54). Alone, a store plans once. A batch to be split in halves (over the store's
        # transaction cap) plans its halves in turn instead.
        extracted: dict[str, Extraction] = {}  # each turn's facts as read once (by the rules, or the model's answer)
        writer = self._writer(caller.context_id)
        if not writer.acquire(blocking=False):
            early, _ = self._plan(caller, turns, tags, now, read, extracted)
            if len(turns) == 1 or early.size <= self.records.max_writes:
                embed(early.texts())
            writer.acquire()
        try:
            return self._store_in_turn(caller, turns, tags=tags, now=now, read=read, extracted=extracted, embed=embed)
        finally:
            writer.release()

    def _store_in_turn(
        self,
        caller: Caller,
        turns: list[Turn],
        *,
        tags: list[str],
        now: datetime,
        read: Callable[[Sequence[tuple[str, int]]], list[tagger.Found]],
        extracted: dict[str, Extraction],
        embed: Callable[[Sequence[str]], list[Vector | None]],
    ) -> list[dict[str, Any]]:
        """Plan, embed, commit — again from what is stored after a conflict — holding the context's writers' turn."""
        for attempt in range(_RETRIES):
            plan, results = self._plan(caller, turns, tags, now, read, extracted)
            if len(turns) > 1 and plan.size > self.records.max_writes:
                half = len(turns) // 2  # nothing is written yet: plan the halves one after the other
                return self._store_group(caller, turns[:half], tags, now) + self._store_group(
                    caller, turns[half:], tags, now
                )
            try:
                plan.finish(self.index, embed, self.queue)
            except Conflict as exc:
                if attempt == _RETRIES - 1 or exc.code != "version_conflict":
                    raise
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
                continue
            return results
        raise AssertionError("unreachable")

    def _writer(self, context_id: str) -> threading.RLock:
        with self._lock:
            return self._writers.setdefault(context_id, threading.RLock())

    def _plan(
        self,
        caller: Caller,
        turns: Sequence[Turn],
        tags: list[str],
        now: datetime,
        read: Callable[[Sequence[tuple[str, int]]], list[tagger.Found]] | None = None,
        extracted: dict[str, Extraction] | None = None,
    ) -> tuple[Plan, list[dict[str, Any]]]:
        ctx = caller.context_id
        extracted = extracted if extracted is not None else {}
        plan = Plan(self.records, ctx, caller.actor, now, self.ids)
        results: list[dict[str, Any]] = []
        default_session = f"sess_{caller.principal.key_id[4:]}_{now:%Y%m%d}"
        # what each turn is embedded as (after the turn before it in its session), known before any is planned,
        # so that the extractor's one encoder pass takes them all as one batch
        last: dict[str, str] = {}
        pending: list[tuple[str, int]] = []
        for turn in turns:
            key = session_key(turn.session_id or default_session, tags)
            if key not in last:
                last[key] = (plan.get("session", key) or {}).get("last_text", "")
            text = turn_text(turn.content, (turn.metadata or {}).get("speaker"))
            embedded = in_context(last[key], text)
            pending.append((embedded, len(embedded) - len(text)))
            last[key] = text[-400:]
        readings = read(pending) if read is not None else [tagger.NOTHING for _ in turns]
        for turn, reading in zip(turns, readings, strict=True):
            said = turn.said_at or now
            session_id = turn.session_id or default_session
            subject = self.subject_of(turn, tags)
            turn_id = new_id("turn")
            speaker = (turn.metadata or {}).get("speaker")
            plan.put(
                "turn",
                turn_id,
                {
                    "content": turn.content,
                    "role": turn.role,
                    "session_id": session_id,
                    "scopes": tags,
                    "said_at": iso(said),
                    "recorded_at": iso(now),
                    "subject": subject,
                    "metadata": turn.metadata or {},
                    **({"expires_at": iso(turn.expires_at)} if turn.expires_at is not None else {}),
                },
                expires_at=turn.expires_at,
            )
            text = turn_text(turn.content, speaker)
            previous = (plan.get("session", session_key(session_id, tags)) or {}).get("last_text", "")
            embed_text = in_context(previous, text)
            assert (embed_text, len(embed_text) - len(text)) in pending  # as the first pass saw it
            turn_data = plan.get("turn", turn_id)
            assert turn_data is not None
            plan.index(index_doc(ctx, "turn", turn_id, turn_data), embed_text)
            touch_session(plan, session_id, tags=tags, said=said, content=turn.content, text=text, turn_id=turn_id)
            turn_data["seq"] = (plan.get("session", session_key(session_id, tags)) or {})["seq"]
            ex = extracted[turn.content] if turn.content in extracted else self._extract(turn.content)
            extracted[turn.content] = ex  # planned again (in turn, after a conflict): the model is not asked twice
            out = self._reconcile(plan, ex, subject=subject, tags=tags, said=said, turn_id=turn_id,
                                  content=turn.content, reading=reading, expires=turn.expires_at)  # fmt: skip
            out |= {"turn_id": turn_id, "session_id": session_id}
            if turn.expires_at is not None:  # swept when it is up, with the facts it gave
                facts = [
                    i
                    for i in plan.written("attribute")
                    if (plan.get("attribute", i) or {}).get("source_turn") == turn_id
                ]
                payload = {"context_id": ctx, "turn": turn_id, "attributes": facts,
                           "session": session_key(session_id, tags)}  # fmt: skip
                plan.later(self.queue.job(EXPIRE_JOB, payload, now, delay=max(turn.expires_at - now, timedelta(0))))
                out["expires_at"] = iso(turn.expires_at)
            results.append(out)
        return plan, results

    def _reconcile(
        self,
        plan: Plan,
        ex: Extraction,
        *,
        subject: str,
        tags: list[str],
        said: datetime,
        turn_id: str,
        content: str = "",
        reading: tagger.Found = tagger.NOTHING,
        expires: datetime | None = None,
    ) -> dict[str, Any]:
        attributes: list[dict[str, Any]] = []
        source = {"kind": "turn", "id": turn_id}
        ended: list[tuple[str, str]] = []  # (edge type, old value) of attributes this turn superseded
        corrections: list[dict[str, Any]] = []
        instructions: list[dict[str, Any]] = []
        entity_key = f"Person:{subject.lower()}"  # the subject's slots' key (internal, never shown)
        subject_id = entities.resolved(plan, "Person", subject)  # the entity its attributes and edges are of
        touched = False
        facts = list(ex.facts) + [Fact(f"instruction:{i.label}", i.description, "instruction") for i in ex.instructions]
        for fact in facts:
            action, old = self._set_attribute(plan, fact, subject=subject, entity_key=entity_key,
                                              subject_id=subject_id, tags=tags, said=said, turn_id=turn_id,
                                              expires=expires)  # fmt: skip
            touched |= action != "unchanged"
            if fact.category == "instruction":
                instructions.append({"label": fact.key.split(":", 1)[1], "description": fact.value, "action": action})
            else:
                attributes.append(
                    {
                        "key": fact.key,
                        "value": fact.value,
                        "category": fact.category,
                        "action": action,
                        **({"previous": old} if old is not None else {}),
                    }
                )
            if fact.correction:
                corrections.append({"key": fact.key, "old": old, "new": fact.value})
            if fact.key in ATTRIBUTE_EDGES and old is not None and old != fact.value:
                ended.append((ATTRIBUTE_EDGES[fact.key][0], old))
        sentence = content[:240]
        mentioned = [{"id": ["Person", subject],
                     "action": entities.mention(plan, "Person", subject, touched, tags, sentence, source)}]  # fmt: skip
        names = list(ex.mentions)
        known = {subject.lower()} | {n.lower() for _, n in names} | {f.value.lower() for f in ex.facts}
        for kind, name in reading.names:  # the learned extractor's names the rules did not give
            if name.lower() not in known and any(c.isupper() for c in name) and len(name) > 1:
                names.append((kind, name))
                known.add(name.lower())
        for etype, name in names:
            mentioned.append(
                {"id": [etype, name], "action": entities.mention(plan, etype, name, False, tags, sentence, source)}
            )
        typed = {n.lower(): (t, n) for t, n in names}
        # an attribute whose value names an entity is an edge too: employer -> works_at, location -> lives_in
        edges = [(r.type, "Person", r.target) for r in ex.relations]
        edges += [(ATTRIBUTE_EDGES[f.key][0], ATTRIBUTE_EDGES[f.key][1], f.value) for f in ex.facts
                  if f.key in ATTRIBUTE_EDGES]  # fmt: skip
        links: list[tuple[tuple[str, str], str, tuple[str, str]]] = []  # learned: between two other names
        for (_, head), rtype, (_, tail) in reading.links:
            h, t = typed.get(head.lower()), typed.get(tail.lower())
            if head.lower() == subject.lower() and t is not None:
                if all(e[0] != rtype or e[2].lower() != tail.lower() for e in edges):
                    edges.append((rtype, t[0], t[1]))
            elif h is not None and t is not None and h != t:
                links.append((h, rtype, t))
        for rtype, old_value in ended:  # the superseded value's edge ends where the new one begins
            gone_id = plan.relation_id(subject, rtype, old_value)
            gone = plan.get("relation", gone_id)
            if gone is not None and not gone.get("until"):
                plan.put("relation", gone_id, dict(gone, until=iso(said)))
        relations = []
        ends = [(("Person", subject), rtype, (ttype, target)) for rtype, ttype, target in edges] + links
        for (htype, head), rtype, (ttype, tail) in ends:
            rid = plan.relation_id(head, rtype, tail)
            current = plan.get("relation", rid)
            exists = current is not None and not current.get("until")
            if not exists:
                plan.put(
                    "relation",
                    rid,
                    {
                        "from": [htype, head],
                        "type": rtype,
                        "to": [ttype, tail],
                        "ends": [entities.resolved(plan, htype, head), entities.resolved(plan, ttype, tail)],
                        "scopes": tags,
                        "since": iso(said),
                        "turn": turn_id,
                        "turn_scopes": tags,
                    },
                )
            relations.append(
                {"from": [htype, head], "type": rtype, "to": [ttype, tail],
                 "action": "unchanged" if exists else "created"}
            )  # fmt: skip
        uncertainties = [{"statement": u} for u in ex.uncertainties]
        return {
            "entities": mentioned,
            "attributes": attributes,
            "relations": relations,
            "instructions": instructions,
            "uncertainties": uncertainties,
            "corrections": corrections,
        }

    def _set_attribute(
        self,
        plan: Plan,
        fact: Fact,
        *,
        subject: str,
        entity_key: str,
        subject_id: str,
        tags: list[str],
        said: datetime,
        turn_id: str,
        expires: datetime | None = None,
    ) -> tuple[str, str | None]:
        single = fact.key in SINGLE_VALUED or fact.key.startswith(("favorite_", "instruction:"))
        slot_id = f"slot:{entity_key}:{fact.key}:{tags_key(tags)}"
        if not single:
            slot_id += f":{_slug(fact.value)}"
        slot = plan.get("slot", slot_id)
        old_value: str | None = None
        action = "created"
        if slot is not None:
            old = plan.get("attribute", slot["attribute_id"])
            if old is not None and old.get("valid_until") is None:
                if old["value"].lower() == fact.value.lower():
                    return "unchanged", None
                old_value = old["value"]
                plan.put("attribute", slot["attribute_id"], dict(old, valid_until=iso(said), status="superseded"))
                plan.close(slot["attribute_id"], said)
                action = "superseded"
            elif old is not None:
                action = "updated"  # a forgotten value is being stated again
        attr_id = new_id("attr")
        text = attribute_text(subject, fact.key, fact.value)
        plan.put(
            "attribute",
            attr_id,
            {
                "subject": subject,
                "entity": subject_id,
                "key": fact.key,
                "value": fact.value,
                "category": fact.category,
                "scopes": tags,
                "valid_from": iso(said),
                "valid_until": None,
                "recorded_at": iso(plan.now),
                "source_turn": turn_id,
                **({"session_id": sid} if (sid := (plan.get("turn", turn_id) or {}).get("session_id")) else {}),
                "status": "current",
                "supersedes": slot["attribute_id"] if slot else None,
                **({"expires_at": iso(expires)} if expires is not None else {}),
            },
            expires_at=expires,
        )
        plan.put("slot", slot_id, {"attribute_id": attr_id})
        data = plan.get("attribute", attr_id)
        assert data is not None
        plan.index(index_doc(plan.ctx, "attribute", attr_id, data), text)
        return action, old_value

    # -- the safety net -------------------------------------------------------------------

    def index_job(self, payload: dict[str, Any]) -> None:
        """Index committed turns and attributes again from the store (the safety net of `Plan.finish`, and a
        rebuild's `reindex`): each as its record says now, with the vector the index has or a new one — a turn's
        made as its write made it, with the turn before it in its session, when the payload names that turn
        (`after`: turn id -> the one before)."""
        ctx = payload["context_id"]
        docs, gone = [], []
        for kind, id_ in payload["items"]:
            item = self.records.get(ctx, kind, id_)
            if item is None:
                gone.append(id_)
            else:
                docs.append(index_doc_of(item))
        have: dict[str, Vector | None] = dict(self.index.vectors(ctx, [d.id for d in docs]))
        missing = [d for d in docs if d.id not in have]
        after: dict[str, str] = payload.get("after") or {}
        before = self.records.get_many(ctx, "turn", sorted({after[d.id] for d in missing if d.id in after}))
        earlier = {i: index_doc_of(item).text[-400:] for i, item in before.items()}  # as the session keeps it
        texts = [in_context(earlier.get(after.get(d.id, "")), d.text) for d in missing]
        have |= dict(zip([d.id for d in missing], self.embed(texts), strict=True))
        if docs:
            self.index.upsert([d.with_vector(have.get(d.id)) for d in docs])
        if gone:
            self.index.delete(ctx, gone)

    # -- reflect --------------------------------------------------------------------------

    def reflect(
        self, caller: Caller, query: str, persist: bool, lens: list[list[str]] | None, progress: Progress = no_progress
    ) -> dict[str, Any]:
        if persist and caller.principal.role not in OVERSEERS:
            raise caller.denied(
                "memory_reflect with persist=true needs principal supervisor or management",
                reason="principal_not_allowed",
                operation="memory_reflect",
            )
        progress(0, 3, "retrieving")
        found = self.recall(caller, query, k=30, lens=lens)
        hits = found["results"]
        progress(1, 3, "finding patterns")
        qterms = set(query_terms(query))
        df: Counter[str] = Counter()
        for h in hits:
            df.update({t for t in query_terms(h["text"]) if len(t) > 3 and t not in qterms and not t.isdigit()})
        patterns = [(t, n) for t, n in df.most_common(5) if n >= 2]
        if self.generator is not None and hits:
            passages = "\n".join(f"[{h['id']}] {h['text']}" for h in hits)
            reflection = self.generator.generate(
                "You find recurring patterns in an agent's memories. Cite nothing that is not in them.",
                f"Question: {query}\n\nMemories:\n{passages}\n\nThe recurring patterns, briefly:",
            )
        elif patterns:
            listed = ", ".join(f"{t} ({n} memories)" for t, n in patterns)
            reflection = f"{len(patterns)} recurring pattern{'s' if len(patterns) > 1 else ''} emerged: {listed}."
        elif hits:
            reflection = f"No recurring pattern across {len(hits)} related memories."
        else:
            reflection = "No memories match this query."
        persisted: list[dict[str, Any]] = []
        if persist and patterns:
            progress(2, 3, "persisting")
            now = self.clock.now()
            tags = self.identity.write_scopes(caller, lens)
            plan = Plan(self.records, caller.context_id, caller.actor, now, self.ids)
            for term, n in patterns:
                fact = Fact(f"pattern_{_slug(term)}", f"{term} recurs in {n} memories about: {query}", "experiential")
                self._set_attribute(plan, fact, subject="memory", entity_key="Topic:reflection",
                                    subject_id="Topic:reflection", tags=tags, said=now,
                                    turn_id="reflection")  # fmt: skip
                persisted.append({"key": fact.key, "value": fact.value, "category": "experiential"})
            plan.finish(self.index, self.embed, self.queue)
        progress(3, 3, "done")
        return {"reflection": reflection, "evidence": [h["id"] for h in hits], "persisted_attributes": persisted}

    # -- forget ---------------------------------------------------------------------------

    def forget(self, caller: Caller, query: str, scopes: list[list[str]] | None) -> dict[str, Any]:
        visibility = self.identity.read_lens(caller, scopes)
        now = self.clock.now()
        vec = self.embed([query])[0]
        targets: dict[str, Hit] = {}
        if vec is not None:
            for h in self.index.search(
                SearchQuery(caller.context_id, query, vec, "vector", 100, ("attribute",), visibility), now
            ):
                if h.semantic is not None and h.semantic >= semantic_evidence(FORGET_COSINE):
                    targets[h.id] = h
        terms = set(query_terms(query))
        for h in self.index.search(
            SearchQuery(caller.context_id, query, None, "bm25", 100, ("attribute",), visibility), now
        ):
            words = set(query_terms(h.text))
            if terms and len(terms & words) * 2 >= len(terms):
                targets[h.id] = h
        plan = Plan(self.records, caller.context_id, caller.actor, now, self.ids)
        for attr_id in sorted(targets):
            data = plan.get("attribute", attr_id)
            if data is not None and data.get("valid_until") is None:
                plan.put("attribute", attr_id, dict(data, valid_until=iso(now), status="forgotten"))
                plan.close(attr_id, now)
        plan.finish(self.index, self.embed, self.queue)
        return {"deleted": len(plan.written("attribute")), "ids": plan.written("attribute")}
