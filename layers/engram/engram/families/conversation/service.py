"""Conversations (Cortex's `conversation_*` tools): threads of messages, readable at once, searchable with
the same hybrid rules as the rest of Engram, and compressible without losing anything.

A thread lives in a context under the scope set it was started with (Cortex's `namespace`: one scope path
inside the key's grant; none: the key's grant), as sessions do: the same thread id under another scope set
is another thread. Records:
- `thread` (`{tags_key}|{thread_id}`): the thread's scopes and `count`, the last message number. Every
  append writes it with the version it read, so messages of one thread are numbered without gaps or
  duplicates however many writers append at once (a loser reads again and retries).
- `message` (`{thread record id}|{n:010d}`): role, content, metadata, created_at; `compressed` once a
  summary stands in its place. History reads the thread's messages by key range, so it sees every
  committed message (read-your-writes), whatever an eventually consistent listing would lag.
Messages are indexed (kind `message`) after the commit, which holds a safety-net job that indexes them
again if this process dies first (DESIGN §9).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from engram.families.entities import graph
from engram.families.knowledge.chunking import sentences
from engram.kernel.caller import Caller
from engram.kernel.clock import iso, new_id, parse_time
from engram.kernel.errors import EngramError, Forbidden, InvalidInput, NotFound, embedding_errors
from engram.kernel.lazy import module
from engram.kernel.ports import (
    IndexDoc,
    Item,
    SearchMode,
    SearchQuery,
    Write,
)
from engram.kernel.retry import on_conflict
from engram.kernel.scopes import can_see, tags_key
from engram.kernel.unit_of_work import UnitOfWork
from engram.search.rules import query_vector
from engram.search.time_phrases import Window, preferred

if TYPE_CHECKING:
    import numpy as np
else:
    np = module("numpy")
from engram.families.conversation import INDEX_JOB
from engram.families.memory.base import Turn, in_context
from engram.families.memory.plan import turn_text
from engram.families.memory.service import MemoryService
from engram.kernel.services import BaseService, Kernel

log = logging.getLogger("engram.conversation")
ROLES = ("user", "assistant", "system", "tool")
SAFETY_NET = timedelta(seconds=30)
SUMMARY_SENTENCES = 6


class ConversationService(BaseService):
    def __init__(self, kernel: Kernel, memory: MemoryService) -> None:
        super().__init__(kernel)
        self.memory = memory

    # -- threads ---------------------------------------------------------------------------

    def _scopes(self, caller: Caller, namespace: str | None) -> list[str]:
        try:
            return self.identity.write_scopes(caller, [[namespace]] if namespace else None)
        except EngramError as exc:
            raise _namespace_error(exc) from exc

    def _lens(self, caller: Caller, namespace: str | None) -> list[list[str]]:
        try:
            return self.identity.read_lens(caller, [[namespace]] if namespace else None)
        except EngramError as exc:
            raise _namespace_error(exc) from exc

    def _thread(self, caller: Caller, thread_id: str, namespace: str | None) -> tuple[str, list[str], Item | None]:
        if not thread_id or len(thread_id) > 256:
            raise InvalidInput("thread_id must be 1 to 256 characters")
        scopes = self._scopes(caller, namespace)
        rid = f"{tags_key(scopes)}|{thread_id}"
        item = self.records.get(caller.context_id, "thread", rid)
        if item is not None and not can_see(item.data.get("scopes"), self._lens(caller, None)):
            item = None
        return rid, scopes, item

    def _existing(self, caller: Caller, thread_id: str, namespace: str | None) -> tuple[str, Item]:
        rid, _, item = self._thread(caller, thread_id, namespace)
        if item is None:
            raise NotFound(f"no thread {thread_id!r}")
        return rid, item

    # -- append ----------------------------------------------------------------------------

    def append(
        self,
        caller: Caller,
        thread_id: str,
        role: str,
        content: str,
        metadata: dict[str, Any] | None,
        namespace: str | None = None,
        extra: dict[str, Any] | None = None,
        extract_facts: bool | None = None,
    ) -> dict[str, Any]:
        """`extract_facts`: the thread's user messages also go through `memory_store` (facts, entities);
        said once, the thread keeps it. `extra`: further fields of the message record (a summary's place in
        the thread, `at`)."""
        if role not in ROLES:
            raise InvalidInput(f"role must be one of {', '.join(ROLES)}")
        if not content.strip():
            raise InvalidInput("content is empty")
        text = turn_text(content, (metadata or {}).get("speaker"))
        embedded: tuple[str, Any] | None = None

        def commit() -> tuple[dict[str, Any], str, bool]:
            """One numbered message and its thread, version-checked; a loser reads again (`on_conflict`)."""
            nonlocal embedded
            rid, scopes, thread = self._thread(caller, thread_id, namespace)
            # As memory embeds a turn: with the message before it, since replies are often elliptic ("Yes,
            # last Friday!"). Before the commit (the slow part); again only if another writer came between.
            previous = thread.data.get("last_text", "") if thread is not None else ""
            embed_text = in_context(previous, text)
            if embedded is None or embedded[0] != embed_text:
                embedded = (embed_text, self._embed([embed_text])[0])
            now = self.clock.now()
            n = (thread.data["count"] if thread is not None else 0) + 1
            message = {
                "message_id": "msg_" + new_id("msg").partition(":")[2],  # Cortex's shape: msg_<id>
                "thread_id": thread_id,
                "thread": rid,
                "n": n,
                "role": role,
                "content": content,
                "metadata": metadata or {},
                "created_at": iso(now),
                "scopes": scopes,
                "compressed": False,
                **(extra or {}),
            }
            mid = f"{rid}|{n:010d}"
            head = {"thread_id": thread_id, "scopes": scopes, "count": n, "created_at": iso(now), "last_text": text}
            if thread is not None:
                head["created_at"] = thread.data["created_at"]
            facts = bool(thread.data.get("extract_facts")) if extract_facts is None and thread else bool(extract_facts)
            head["extract_facts"] = facts
            writes = [
                Write(caller.context_id, "thread", rid, head, caller.actor, thread.version if thread else 0),
                Write(caller.context_id, "message", mid, message, caller.actor, 0),
            ]
            vector = embedded[1]
            UnitOfWork(self.records, self.queue).commit(
                writes,
                now,
                reindex=lambda _: self.index.upsert([_index_doc(caller.context_id, mid, message).with_vector(vector)]),
                net=(INDEX_JOB, {"context_id": caller.context_id, "ids": [mid]}),
                jobs=[graph.extraction_job(self.queue, caller.context_id, "message", mid, now)],
            )
            return message, mid, facts

        message, _mid, facts = on_conflict(commit, sleep=self.sleep)
        if facts and role == "user" and self.memory is not None:
            flat = {k: v for k, v in (metadata or {}).items() if isinstance(v, str | int | float | bool)}
            turn = Turn(content, "user", session_id=thread_id, said_at=parse_time(message["created_at"]),
                        metadata=flat or None)  # fmt: skip
            self.memory.store(caller, turn, [[namespace]] if namespace else None)
        return {"message_id": message["message_id"], "thread_id": thread_id, "created_at": message["created_at"]}

    def _embed(self, texts: Sequence[str]) -> list[Any]:
        if self.embedder is None or not texts:
            return [None] * len(texts)
        with embedding_errors():
            return list(self.embedder.embed(list(texts)))

    def index_job(self, payload: dict[str, Any]) -> None:
        """Messages indexed again from the store (the safety net of `append`, and a rebuild's `reindex`), with
        the vector the index has or one made as `append` made it: with the message before it in its thread."""
        ctx = payload["context_id"]
        found = self.records.get_many(ctx, "message", list(payload["ids"]))
        docs = [_index_doc(ctx, mid, item.data) for mid, item in found.items()]
        have = self.index.vectors(ctx, [d.id for d in docs])
        missing = [d for d in docs if d.id not in have]
        before = {d.id: f"{found[d.id].data['thread']}|{int(found[d.id].data['n']) - 1:010d}" for d in missing}
        earlier = {m: _index_doc(ctx, m, i.data).text for m, i in self.records.get_many(ctx, "message",
                   sorted(set(before.values()))).items()}  # fmt: skip
        texts = [in_context(earlier.get(before[d.id]), d.text) for d in missing]
        fresh = dict(zip([d.id for d in missing], self._embed(texts), strict=True))
        if docs:
            self.index.upsert([d.with_vector(have.get(d.id, fresh.get(d.id))) for d in docs])

    # -- history ---------------------------------------------------------------------------

    def _messages(self, caller: Caller, rid: str, count: int) -> list[Item]:
        """Every message of the thread, in order: a listing, completed by key for what it may lag behind
        (DynamoDB answers listings from an index that trails the table)."""
        found: dict[int, Item] = {}
        cursor: str | None = None
        while True:
            page = self.records.query(caller.context_id, "message", prefix=rid + "|", cursor=cursor, limit=1000)
            found.update({int(i.data["n"]): i for i in page.items})
            if page.cursor is None:
                break
            cursor = page.cursor
        for n in range(1, count + 1):
            if n not in found:
                item = self.records.get(caller.context_id, "message", f"{rid}|{n:010d}")
                if item is not None:
                    found[n] = item
        return [found[n] for n in sorted(found)]

    def history(
        self,
        caller: Caller,
        thread_id: str,
        limit: int,
        before: str | None,
        after: str | None,
        include_compressed: bool = False,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        rid, thread = self._existing(caller, thread_id, namespace)
        lo, hi = _time(after, "after"), _time(before, "before")
        shown = []
        for m in self._messages(caller, rid, thread.data["count"]):
            d = m.data
            if d.get("compressed") and not include_compressed:
                continue
            at = parse_time(d["created_at"])
            if (lo is not None and at is not None and at <= lo) or (hi is not None and at is not None and at >= hi):
                continue
            shown.append(d)
        shown.sort(key=lambda d: d.get("at", d["n"]))  # a summary stands where the messages it covers stood
        if after is not None and before is None:
            page, more = shown[:limit], len(shown) > limit  # the first ones after the time; more follow
        else:
            page, more = shown[-limit:], len(shown) > limit  # the latest ones; older ones exist
        return {"thread_id": thread_id, "messages": [_public(d) for d in page], "has_more": more}

    # -- search ----------------------------------------------------------------------------

    def search(
        self,
        caller: Caller,
        query: str,
        thread_id: str | None,
        namespace: str | None,
        limit: int,
        threshold: float | None = None,
        window: Window | None = None,
    ) -> dict[str, Any]:
        """Messages by hybrid search; `window`: only those sent within it (given as since / until), or those first
        (read from the query's words: `engram.search.time_phrases.preferred`)."""
        visibility = self._lens(caller, namespace)
        meta: dict[str, Any] = {}
        if thread_id is not None:
            rid, _ = self._existing(caller, thread_id, namespace)
            meta["thread"] = rid
        with embedding_errors():
            vector = query_vector(self.embedder, query, ranks=True)
        mode: SearchMode = "hybrid" if vector is not None else "bm25"
        # what was said ranks as memory ranks turns (the convex fusion measured on LoCoMo)
        soft = window is not None and window.soft
        ranges = {"created_at": window.bounds()} if window is not None and not soft else {}
        pool = 2 * limit if soft else limit
        q = SearchQuery(caller.context_id, query, vector, mode, pool, ("message",), visibility, None, meta, ranges)
        hits = self.index.search(q, self.clock.now())
        if window is not None and soft:
            hits = preferred(hits, window, limit, "created_at")
        results = []
        for h in hits:
            if threshold is not None and h.score < threshold:
                break
            item = self.records.get(caller.context_id, "message", h.id)
            if item is None or not can_see(item.data.get("scopes"), visibility):
                continue
            d = item.data
            results.append(
                {
                    "message_id": d["message_id"],
                    "thread_id": d["thread_id"],
                    "role": d["role"],
                    "content": d["content"],
                    "score": h.score,
                    "created_at": d["created_at"],
                    "compressed": bool(d.get("compressed")),
                }
            )
        return {"results": results}

    # -- summarize -------------------------------------------------------------------------

    def summarize(
        self, caller: Caller, thread_id: str, keep_recent: int, namespace: str | None = None
    ) -> dict[str, Any]:
        """The older messages (all but the `keep_recent` latest) leave the default history; a summary
        message stands in their place. They stay in the store, in search and in `include_compressed`
        history. The summary is written first, then the messages are marked, so an interruption never
        hides a message that no summary covers."""
        rid, thread = self._existing(caller, thread_id, namespace)
        live = [m for m in self._messages(caller, rid, thread.data["count"]) if not m.data.get("compressed")]
        older = live[: max(0, len(live) - keep_recent)] if keep_recent > 0 else live
        if not older:
            return {"thread_id": thread_id, "summary": "", "original_count": len(live), "compressed_count": len(live)}
        summary = self._summary([m.data for m in older])
        covered = [m.data["n"] for m in older]
        # the summary stands where the messages it covers stood (history orders by `at`, else by number)
        meta = {"summary": True, "covers": [min(covered), max(covered)]}
        self.append(caller, thread_id, "system", summary, meta, namespace, extra={"at": max(covered) + 0.5})
        now = self.clock.now()
        writes = [
            Write(caller.context_id, "message", m.id, dict(m.data, compressed=True), caller.actor, m.version)
            for m in older
        ]
        for i in range(0, len(writes), self.records.max_writes):
            self.records.transact(writes[i : i + self.records.max_writes], now)
        kept = len(live) - len(older)
        return {"thread_id": thread_id, "summary": summary, "original_count": len(live), "compressed_count": kept + 1}

    def _summary(self, messages: list[dict[str, Any]]) -> str:
        if self.generator is not None:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
            try:
                return self.generator.generate(
                    "Summarize this conversation in a few sentences: who wanted what, what was decided, what is open.",
                    text[:20_000],
                    max_tokens=300,
                ).strip()
            except Exception:  # the rules below stand in, as everywhere an LLM is optional
                log.exception("summary by the generator failed; extractive summary instead")
        return extractive_summary(messages, self._embed)


def extractive_summary(messages: list[dict[str, Any]], embed: Any, n: int = SUMMARY_SENTENCES) -> str:
    """The sentences that carry the thread, in the order they were said: each sentence scored by its
    closeness to the whole (the mean of all sentence vectors), chosen greedily with a penalty for
    repeating one already chosen (maximal marginal relevance); without vectors, by shared words."""
    said = [(m["role"], s) for m in messages for s in sentences(m["content"]) if len(s.split()) >= 3]
    if not said:
        said = [(m["role"], m["content"].strip()) for m in messages if m["content"].strip()]
    if len(said) <= n:
        chosen = list(range(len(said)))
    else:
        vectors = embed([s for _, s in said])
        if vectors and vectors[0] is not None:
            v = np.asarray(vectors, dtype=np.float32)
        else:  # bag of words
            vocab = {w: i for i, w in enumerate(sorted({w.lower() for _, s in said for w in s.split()}))}
            v = np.zeros((len(said), len(vocab)), dtype=np.float32)
            for j, (_, s) in enumerate(said):
                for w in s.split():
                    v[j, vocab[w.lower()]] += 1
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        centre = v.mean(axis=0)
        relevance = v @ centre
        chosen = []
        while len(chosen) < n:
            penalty = (v @ v[chosen].T).max(axis=1) if chosen else np.zeros(len(said))
            score = 0.7 * relevance - 0.3 * penalty
            score[chosen] = -np.inf
            chosen.append(int(np.argmax(score)))
        chosen.sort()
    return " ".join(f"{role}: {text}" if role != "user" else text for role, text in (said[i] for i in chosen))


def _index_doc(ctx: str, mid: str, d: dict[str, Any]) -> IndexDoc:
    """What the index holds for a message: its text as memory indexes a turn (a `speaker` in its metadata
    leads), so both doors to what was said search alike."""
    meta = {"thread": d["thread"], "role": d["role"], "created_at": d["created_at"]}
    text = turn_text(d["content"], (d.get("metadata") or {}).get("speaker"))
    return IndexDoc(ctx, "message", mid, text, None, d["scopes"], None, None, meta)


def _public(d: dict[str, Any]) -> dict[str, Any]:
    out = {"id": d["message_id"], "role": d["role"], "content": d["content"], "created_at": d["created_at"]}
    if d.get("metadata"):
        out["metadata"] = d["metadata"]
    if d.get("compressed"):
        out["compressed"] = True
    return out


def _time(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_time(value)
    except (ValueError, EngramError) as exc:
        raise InvalidInput(f"{name} must be an ISO 8601 time") from exc


def _namespace_error(exc: EngramError) -> EngramError:
    if isinstance(exc, Forbidden):
        return Forbidden(f"namespace outside the key's grant: {exc.message}", code="namespace_error")
    return InvalidInput(f"namespace: {exc.message}", code="namespace_error")
