"""The memory family's domain logic (Spectron's memory tools): store, recall, reflect, profile, forget.

Storage model, all in the caller's context:
- `turn` items: what was said, by whom, in which session, when said (`said_at`) and recorded.
- `attribute` items: one value of one key of one subject, with valid_from / valid_until. A slot item
  (`slot`) points at the current attribute of a single-valued key; superseding closes the old
  attribute (valid_until = when the new value was said) and keeps it.
- `entity`, `relation`, `session` items. Every write goes through `RecordStore.transact`.
Turns and attributes are indexed for hybrid search with their scope tags and validity.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from engram.clock import Clock, iso, new_id, parse_time
from engram.errors import Conflict, InvalidInput
from engram.families.entities import service as entities
from engram.families.memory import INDEX_JOB
from engram.families.memory.extraction import SINGLE_VALUED, Extraction, Fact, extract
from engram.identity import OVERSEERS, Caller, IdentityService
from engram.ports import (
    Embedder,
    Generator,
    Hit,
    IndexDoc,
    Item,
    Progress,
    RecordStore,
    SearchIndex,
    SearchMode,
    SearchQuery,
    Vector,
    Write,
    no_progress,
    scan,
)
from engram.queue import Queue
from engram.scopes import tags_key
from engram.search_rules import query_terms, query_vector, semantic_evidence
from engram.unit_of_work import UnitOfWork

CATEGORY_SECTION = {"identity": "static", "knowledge": "static", "context": "dynamic", "preference": "preferences"}
FORGET_COSINE = 0.55
CONTEXT_EMBEDDING = True  # see _plan; measured in bench/RESULTS.md
_RETRIES = 200  # as engram.retry: concurrent writers land one at a time
SAFETY_NET = timedelta(seconds=30)  # a store's index job is due this long after its commit (see _Plan.finish)
log = logging.getLogger("engram.memory")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:64] or "x"


@dataclass(frozen=True)
class Turn:
    content: str
    role: str = "user"
    session_id: str | None = None
    said_at: datetime | None = None
    metadata: dict[str, str | int | float | bool] | None = None


class MemoryService:
    def __init__(
        self,
        records: RecordStore,
        index: SearchIndex,
        embedder: Embedder | None,
        clock: Clock,
        identity: IdentityService,
        queue: Queue,
        generator: Generator | None = None,
        cache_size: int = 512,
    ) -> None:
        self.records = records
        self.index = index
        self.embedder = embedder
        self.clock = clock
        self.identity = identity
        self.generator = generator
        self._cache: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._writers: dict[str, threading.RLock] = {}
        self.queue = queue  # its jobs are registered by the composition root (engram.wiring)

    # -- helpers --------------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> list[Vector | None]:
        if self.embedder is None or not texts:
            return [None] * len(texts)
        return list(self.embedder.embed(list(texts)))

    @staticmethod
    def subject_of(turn: Turn, tags: Sequence[str]) -> str:
        speaker = (turn.metadata or {}).get("speaker")
        if isinstance(speaker, str) and speaker.strip():
            return speaker.strip()
        for tag in tags:
            parts = tag.split("/")
            if "user" in parts[:-1]:
                return parts[parts.index("user") + 1]
        return turn.role if turn.role not in ("user", "assistant", "system") else "user"

    def _extract(self, content: str) -> Extraction:
        if self.generator is not None:
            from engram.families.memory.llm_extraction import extract_with_llm

            result: Extraction = extract_with_llm(self.generator, content)
            return result
        return extract(content)

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

        def embed(texts: Sequence[str]) -> list[Vector | None]:
            missing = [t for t in dict.fromkeys(texts) if t not in memo]
            if missing:
                memo.update(zip(missing, self.embed(missing), strict=True))
            return [memo[t] for t in texts]

        with self._writer(caller.context_id):
            for attempt in range(_RETRIES):
                plan, results = self._plan(caller, turns, tags, now)
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
        self, caller: Caller, turns: Sequence[Turn], tags: list[str], now: datetime
    ) -> tuple[_Plan, list[dict[str, Any]]]:
        ctx = caller.context_id
        plan = _Plan(self.records, ctx, caller.actor, now)
        results: list[dict[str, Any]] = []
        default_session = f"sess_{caller.principal.key_id[4:]}_{now:%Y%m%d}"
        for turn in turns:
            said = turn.said_at or now
            session_id = turn.session_id or default_session
            subject = self.subject_of(turn, tags)
            turn_id = new_id("turn")
            speaker = (turn.metadata or {}).get("speaker")
            meta: dict[str, Any] = {k: v for k, v in (turn.metadata or {}).items()}
            meta |= {"session_id": session_id, "role": turn.role, "said_at": iso(said)}
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
                },
            )
            text = turn_text(turn.content, speaker)
            # The vector also sees the turn before it in the session: replies are often elliptic
            # ("Yes, last Friday!") and only the previous turn says what they are about.
            previous = (plan.get("session", session_key(session_id, tags)) or {}).get("last_text", "")
            embed_text = f"{previous}\n{text}" if previous and CONTEXT_EMBEDDING else text
            plan.index(IndexDoc(ctx, "turn", turn_id, text, None, tags, said, None, meta), embed_text)
            self._touch_session(plan, session_id, tags, said, turn.content, text)
            turn_data = plan.get("turn", turn_id)
            assert turn_data is not None
            turn_data["seq"] = (plan.get("session", session_key(session_id, tags)) or {})["seq"]
            ex = self._extract(turn.content)
            out = self._reconcile(plan, ex, subject, tags, said, turn_id, turn.content)
            out |= {"turn_id": turn_id, "session_id": session_id}
            results.append(out)
        return plan, results

    def _touch_session(
        self, plan: _Plan, session_id: str, tags: list[str], said: datetime, content: str, text: str
    ) -> None:
        current = plan.get("session", session_key(session_id, tags))
        data = (
            dict(current)
            if current
            else {
                "session_id": session_id,
                "first_at": iso(said),
                "last_at": iso(said),
                "turns": 0,
                "tokens": 0,
                "scopes": [],
            }
        )
        first, last = parse_time(data["first_at"]), parse_time(data["last_at"])
        assert first is not None and last is not None
        data["first_at"], data["last_at"] = iso(min(first, said)), iso(max(last, said))
        data["turns"] += 1
        data["tokens"] += approx_tokens(content)
        data["scopes"] = sorted(set(data["scopes"]) | set(tags))
        data["last_text"] = text[-400:]
        data["seq"] = data["turns"]  # the turn's place in its session: a definite order under concurrency
        plan.put("session", session_key(session_id, tags), data)

    def _reconcile(
        self,
        plan: _Plan,
        ex: Extraction,
        subject: str,
        tags: list[str],
        said: datetime,
        turn_id: str,
        content: str = "",
    ) -> dict[str, Any]:
        attributes: list[dict[str, Any]] = []
        source = {"kind": "turn", "id": turn_id}
        ended: list[tuple[str, str]] = []  # (edge type, old value) of attributes this turn superseded
        corrections: list[dict[str, Any]] = []
        instructions: list[dict[str, Any]] = []
        entity_key = f"Person:{subject.lower()}"
        touched = False
        facts = list(ex.facts) + [Fact(f"instruction:{i.label}", i.description, "instruction") for i in ex.instructions]
        for fact in facts:
            action, old = self._set_attribute(plan, fact, subject, entity_key, tags, said, turn_id)
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
        entities = [{"id": ["Person", subject],
                     "action": self._entity(plan, "Person", subject, touched, tags, sentence, source)}]  # fmt: skip
        for etype, name in ex.mentions:
            entities.append(
                {"id": [etype, name], "action": self._entity(plan, etype, name, False, tags, sentence, source)}
            )
        # an attribute whose value names an entity is an edge too: employer -> works_at, location -> lives_in
        edges = [(r.type, "Person", r.target) for r in ex.relations]
        edges += [(ATTRIBUTE_EDGES[f.key][0], ATTRIBUTE_EDGES[f.key][1], f.value) for f in ex.facts
                  if f.key in ATTRIBUTE_EDGES]  # fmt: skip
        for rtype, old_value in ended:  # the superseded value's edge ends where the new one begins
            gone = plan.get("relation", f"rel:{_slug(subject)}:{rtype}:{_slug(old_value)}")
            if gone is not None and not gone.get("until"):
                plan.put("relation", f"rel:{_slug(subject)}:{rtype}:{_slug(old_value)}", dict(gone, until=iso(said)))
        relations = []
        for rtype, ttype, target in edges:
            rid = f"rel:{_slug(subject)}:{rtype}:{_slug(target)}"
            current = plan.get("relation", rid)
            exists = current is not None and not current.get("until")
            if not exists:
                plan.put(
                    "relation",
                    rid,
                    {
                        "from": ["Person", subject],
                        "type": rtype,
                        "to": [ttype, target],
                        "scopes": tags,
                        "since": iso(said),
                        "turn": turn_id,
                        "turn_scopes": tags,
                    },
                )
            relations.append(
                {"from": ["Person", subject], "type": rtype, "to": [ttype, target],
                 "action": "unchanged" if exists else "created"}
            )  # fmt: skip
        uncertainties = [{"statement": u} for u in ex.uncertainties]
        return {
            "entities": entities,
            "attributes": attributes,
            "relations": relations,
            "instructions": instructions,
            "uncertainties": uncertainties,
            "corrections": corrections,
        }

    def _entity(
        self,
        plan: _Plan,
        etype: str,
        name: str,
        touched: bool,
        tags: list[str],
        sentence: str = "",
        source: dict[str, str] | None = None,
    ) -> str:
        """Entities belong to the entities family: memory records a mention through it. An entity carries
        the scopes of everything that mentioned it (engram.scopes.can_see decides who sees it)."""
        return entities.mention(plan, etype, name, touched, tags, sentence, source)

    def _set_attribute(
        self,
        plan: _Plan,
        fact: Fact,
        subject: str,
        entity_key: str,
        tags: list[str],
        said: datetime,
        turn_id: str,
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
                "entity": entity_key,
                "key": fact.key,
                "value": fact.value,
                "category": fact.category,
                "scopes": tags,
                "valid_from": iso(said),
                "valid_until": None,
                "recorded_at": iso(plan.now),
                "source_turn": turn_id,
                "status": "current",
                "supersedes": slot["attribute_id"] if slot else None,
            },
        )
        plan.put("slot", slot_id, {"attribute_id": attr_id})
        meta: dict[str, str | int | float | bool] = {
            "key": fact.key,
            "category": fact.category,
            "said_at": iso(said) or "",
            "source_turn": turn_id,
        }
        plan.index(IndexDoc(plan.ctx, "attribute", attr_id, text, None, tags, said, None, meta), text)
        return action, old_value

    # -- recall ---------------------------------------------------------------------------

    def recall(
        self,
        caller: Caller,
        query: str,
        k: int = 10,
        lens: list[list[str]] | None = None,
        as_of: datetime | None = None,
        mode: SearchMode = "hybrid",
        kinds: Sequence[str] | None = None,
        extra_visibility: list[list[str]] | None = None,
        everything_when_small: bool = True,
    ) -> dict[str, Any]:
        """`everything_when_small`: when the context holds no more than `k` memories, answer all of them in
        time order (the `full_context` tier: nothing can be missed); off, a search ranks them as always."""
        started = self.clock_ms()
        visibility = self.identity.read_lens(caller, lens)
        if extra_visibility is not None:
            visibility = [sorted(set(a) | set(b)) for a in visibility for b in extra_visibility]
        kinds = tuple(kinds) if kinds else ("turn", "attribute")
        # The cache is keyed by the index's generation of the context, which every writer moves (another
        # process on the same data folder too); an index that has none (OpenSearch) caches nothing.
        generation = self.index.generation(caller.context_id)
        key = (
            caller.context_id,
            generation,
            tuple(map(tuple, visibility)),
            " ".join(query.lower().split()),
            k,
            iso(as_of),
            mode,
            kinds,
            everything_when_small,
        )
        with self._lock:
            cached = self._cache.get(key) if generation is not None else None
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is not None:
            return dict(cached, tier="cache", queryMs=self.clock_ms() - started)
        total = self.index.count(caller.context_id)
        vec = query_vector(self.embedder, query, ranks=mode != "bm25")  # bm25 too: scores weigh both evidences
        if total <= k and everything_when_small:
            if vec is not None:
                hits = self.index.search(
                    SearchQuery(caller.context_id, query, vec, "vector", k, kinds, visibility, as_of), self.clock.now()
                )
            else:  # no embedder: BM25 would drop what shares no word with the query, so list the records
                hits = self._listing(caller, kinds, visibility, as_of or self.clock.now())
            hits.sort(key=lambda h: (str(h.metadata.get("said_at", "")), h.id))
            tier = "full_context"
        else:
            q = SearchQuery(caller.context_id, query, vec, mode, k, kinds, visibility, as_of, fusion="convex")
            hits = self.index.search(q, self.clock.now())
            tier = "direct" if hits and hits[0].kind == "attribute" else "hybrid"
        result = {"context": format_context(hits), "results": [hit_dict(h) for h in hits], "tier": tier}
        with self._lock:
            if generation is not None:
                self._cache[key] = result
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return dict(result, queryMs=self.clock_ms() - started)

    def _listing(self, caller: Caller, kinds: Sequence[str], visibility: list[list[str]], at: datetime) -> list[Hit]:
        """Every visible turn and attribute valid at `at`, as search hits (score 1)."""
        from engram.scopes import can_see
        from engram.search_rules import valid_at

        hits: list[Hit] = []
        for kind in kinds:
            for item in scan(self.records, caller.context_id, kind):
                if not can_see(item.data["scopes"], visibility):
                    continue
                doc = index_doc_of(item)
                if kind == "turn" and doc.valid_from is not None and doc.valid_from > at:
                    continue
                if kind != "turn" and not valid_at(doc.valid_from, doc.valid_until, at):
                    continue
                hits.append(Hit(item.id, kind, 1.0, doc.text, doc.metadata, doc.scopes))
        return hits

    def _index_job(self, payload: dict[str, Any]) -> None:
        """Index committed turns and attributes again from the store (the safety net of `_Plan.finish`):
        each as its record says now, with the vector the index has or a new one."""
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
        have |= dict(zip([d.id for d in missing], self.embed([d.text for d in missing]), strict=True))
        if docs:
            self.index.upsert([d.with_vector(have.get(d.id)) for d in docs])
        if gone:
            self.index.delete(ctx, gone)

    def clock_ms(self) -> float:
        return round(time.perf_counter() * 1000, 3)

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
            plan = _Plan(self.records, caller.context_id, caller.actor, now)
            for term, n in patterns:
                fact = Fact(f"pattern_{_slug(term)}", f"{term} recurs in {n} memories about: {query}", "experiential")
                self._set_attribute(plan, fact, "memory", "Topic:reflection", tags, now, "reflection")
                persisted.append({"key": fact.key, "value": fact.value, "category": "experiential"})
            plan.finish(self.index, self.embed, self.queue)
        progress(3, 3, "done")
        return {"reflection": reflection, "evidence": [h["id"] for h in hits], "persisted_attributes": persisted}

    # -- profile --------------------------------------------------------------------------

    def current_attributes(self, caller: Caller, visibility: list[list[str]]) -> list[Item]:
        from engram.scopes import can_see

        items = scan(self.records, caller.context_id, "attribute")
        return [i for i in items if i.data.get("valid_until") is None and can_see(i.data["scopes"], visibility)]

    def profile(self, caller: Caller, scopes: list[list[str]] | None) -> dict[str, Any]:
        visibility = self.identity.read_lens(caller, scopes)
        sections: dict[str, list[dict[str, Any]]] = {
            "static": [],
            "dynamic": [],
            "preferences": [],
            "instructions": [],
            "experiential": [],
        }
        for item in self.current_attributes(caller, visibility):
            d = item.data
            if d["category"] == "instruction":
                sections["instructions"].append({"label": d["key"].split(":", 1)[1], "description": d["value"]})
            else:
                section = CATEGORY_SECTION.get(d["category"], "experiential")
                sections[section].append(
                    {"key": d["key"], "value": d["value"], "subject": d["subject"], "since": d["valid_from"]}
                )
        return sections

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
        plan = _Plan(self.records, caller.context_id, caller.actor, now)
        for attr_id in sorted(targets):
            data = plan.get("attribute", attr_id)
            if data is not None and data.get("valid_until") is None:
                plan.put("attribute", attr_id, dict(data, valid_until=iso(now), status="forgotten"))
                plan.close(attr_id, now)
        plan.finish(self.index, self.embed, self.queue)
        return {"deleted": len(plan.written("attribute")), "ids": plan.written("attribute")}


class _Plan:
    """Writes collected for one transaction, with read-your-writes and expected versions."""

    def __init__(self, records: RecordStore, ctx: str, actor: str, now: datetime) -> None:
        self.records, self.ctx, self.actor, self.now = records, ctx, actor, now
        self._seen: dict[tuple[str, str], tuple[int, dict[str, Any] | None]] = {}
        self._writes: dict[tuple[str, str], dict[str, Any]] = {}
        self._docs: list[tuple[IndexDoc, str]] = []
        self._closings: list[tuple[str, datetime]] = []

    def get(self, kind: str, id_: str) -> dict[str, Any] | None:
        key = (kind, id_)
        if key in self._writes:
            return self._writes[key]
        if key not in self._seen:
            item = self.records.get(self.ctx, kind, id_)
            self._seen[key] = (item.version, item.data) if item else (0, None)
        return self._seen[key][1]

    def put(self, kind: str, id_: str, data: dict[str, Any]) -> None:
        self.get(kind, id_)  # remember the version we build on
        self._writes[(kind, id_)] = data

    def index(self, doc: IndexDoc, embed_text: str) -> None:
        """Index `doc` (its vector from `embed_text`) once the records are committed."""
        self._docs.append((doc, embed_text))

    def close(self, id_: str, until: datetime) -> None:
        """Close an indexed document's validity once the records are committed."""
        self._closings.append((id_, until))

    def finish(self, index: SearchIndex, embed: Callable[[Sequence[str]], list[Vector | None]], queue: Queue) -> None:
        """Embed first (the slow part, before anything is written), then commit the records in one
        transaction, then index (DESIGN §9: nothing visible before the commit; a failed commit leaves
        nothing) — `engram.unit_of_work`: the commit also holds a safety net that indexes the same records
        again from the store if this process dies (or the index fails) before it has."""
        vectors = embed([t for _, t in self._docs])
        touched = [[d.kind, d.id] for d, _ in self._docs] + [["attribute", id_] for id_, _ in self._closings]
        writes = self._writes_to_commit()
        if not writes:
            return

        def reindex(_: list[Item]) -> None:
            index.upsert(
                [d.with_vector(v) for (d, _), v in zip(self._docs, vectors, strict=True)],
                [(self.ctx, id_, until) for id_, until in self._closings],
            )

        net = (INDEX_JOB, {"context_id": self.ctx, "items": touched}) if touched else None
        UnitOfWork(self.records, queue).commit(writes, self.now, reindex=reindex if touched else None, net=net)

    def written(self, kind: str) -> list[str]:
        return [i for (k, i) in self._writes if k == kind]

    @property
    def size(self) -> int:
        """How many records the commit writes (the index job included)."""
        return len(self._writes) + (1 if self._docs or self._closings else 0)

    def _writes_to_commit(self) -> list[Write]:
        return [
            Write(self.ctx, kind, id_, data, self.actor, expected_version=self._seen[(kind, id_)][0])
            for (kind, id_), data in self._writes.items()
        ]


def index_doc_of(item: Item) -> IndexDoc:
    """What the index holds for a turn, an attribute or an entity record (as `_plan` indexes them)."""
    d = item.data
    if item.kind == "entity":
        return entities.index_doc(item.context_id, item.id, d)
    if item.kind == "turn":
        meta = dict(d.get("metadata") or {}) | {
            "session_id": d["session_id"],
            "role": d["role"],
            "said_at": d["said_at"],
        }
        text = turn_text(d["content"], meta.get("speaker"))
        return IndexDoc(item.context_id, "turn", item.id, text, None, d["scopes"], parse_time(d["said_at"]), None, meta)
    meta = {"key": d["key"], "category": d["category"], "said_at": d["valid_from"], "source_turn": d["source_turn"]}
    text = attribute_text(d["subject"], d["key"], d["value"])
    return IndexDoc(
        item.context_id,
        "attribute",
        item.id,
        text,
        None,
        d["scopes"],
        parse_time(d["valid_from"]),
        parse_time(d["valid_until"]),
        meta,
    )


def session_key(session_id: str, tags: Sequence[str]) -> str:
    """A session belongs to the scopes it was created under: the same `session_id` said under another
    scope set is another session (it never joins, counts in or reads from the first)."""
    return f"{session_id}|{tags_key(tags)}"


def turn_text(content: str, speaker: object) -> str:
    """What is indexed and shown for a turn: the speaker's name leads when known."""
    return f"{speaker}: {content}" if isinstance(speaker, str) and speaker else content


def attribute_text(subject: str, key: str, value: str) -> str:
    return f"{subject} {key.replace('_', ' ')}: {value}"


def approx_tokens(text: str) -> int:
    """Token estimate used for budgets: ~4 characters a token (the usual English rule of thumb)."""
    return max(1, (len(text) + 3) // 4)


# attributes whose value names an entity, and the edge they make: (edge type, the entity's type)
ATTRIBUTE_EDGES = {"employer": ("works_at", "Organization"), "location": ("lives_in", "Location")}


def hit_dict(h: Hit) -> dict[str, Any]:
    meta = dict(h.metadata)
    return {
        "id": h.id,
        "kind": h.kind,
        "text": h.text,
        "score": round(h.score, 6),
        # what the score combines (README "Scores"): the share of the query's words, and the meaning
        "evidence": {"lexical": round(h.lexical, 6), "semantic": None if h.semantic is None else round(h.semantic, 6)},
        "said_at": meta.get("said_at"),
        "session_id": meta.get("session_id"),
        "metadata": meta,
    }


def format_context(hits: Sequence[Hit]) -> str:
    """A block ready for prompt injection: facts first, then what was said, each with its date."""
    facts = [h for h in hits if h.kind == "attribute"]
    turns = [h for h in hits if h.kind != "attribute"]
    lines: list[str] = []
    if facts:
        lines.append("Known facts:")
        lines += [f"- {h.text} (since {str(h.metadata.get('said_at', ''))[:10]})" for h in facts]
    if turns:
        if lines:
            lines.append("")
        lines.append("Relevant conversation:")
        lines += [f"- [{str(h.metadata.get('said_at', ''))[:10]}] {h.text}" for h in turns]
    return "\n".join(lines)


def validate_query(query: str) -> str:
    if not query.strip():
        raise InvalidInput("query must not be empty")
    return query
