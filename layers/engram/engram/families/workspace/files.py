"""The code workspace (Agrama's tools): files with provenance and versions, their import graph, code search.

A workspace is a context's files under one scope set (the writer's grant, as every write): a file is one
`wfile` record whose id is `scope set | path`, each write a new version carrying its provenance (agent id,
the key's principal and key id, reason, time) and the content's blob key (named by the file and the bytes'
hash, `shapes.blob_key`: a version's bytes never change, nothing refers to them before the commit, and no
other file shares them). A file's imports come from the same tree-sitter parse that checks its syntax
(`engram.families.workspace.code`); each one that names a workspace file is an edge, kept twice: in the
file's data (forward) and as a `wdep` entry `target ␟ source` written in the same transaction (reverse: who
depends on a file is one key range). Deleting is not a tool of Agrama's.

Search: each file's text, in windows of about 60 lines, is in the search index (kind `wchunk`: BM25 and,
with an embedder, vectors), brought up to date right after the commit, with a safety-net job committed
with the write for a crash in between.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import blake3

from engram.families.workspace import INDEX_JOB, code
from engram.families.workspace.shapes import (
    CHUNK,
    DEP,
    EMBED_LATER,
    EMBED_SLICE,
    FILE,
    MAX_FILE_BYTES,
    MAX_GRAPH_ENTRIES,
    SEP,
    SYNC_EMBED_WINDOWS,
    blob_key,
    bounded,
    chunk_docs,
    clean_path,
    slices,
    windows,
)
from engram.kernel.caller import Caller
from engram.kernel.clock import iso
from engram.kernel.errors import Conflict, InvalidInput, NotFound, embedding_errors
from engram.kernel.ports import Hit, IndexDoc, Item, SearchMode, SearchQuery, Vector, Write
from engram.kernel.queue import past_hand_over
from engram.kernel.retry import on_conflict
from engram.kernel.scopes import can_see, tags_key
from engram.kernel.services import BaseService
from engram.kernel.unit_of_work import UnitOfWork
from engram.search.rules import query_vector

log = logging.getLogger("engram.workspace")


@dataclass(frozen=True)
class NewFile:
    path: str
    content: str
    reason: str
    agent_id: str | None = None
    validate_syntax: bool = True
    update_dependencies: bool = True
    contributors: tuple[str, ...] = ()
    expected_version: int | None = None  # 0: must be new; None: the last writer wins, each with its version
    # its vectors from a job a moment later (keyword-searchable at once): a document edited call after call
    # (sync_document) is embedded once for a run of edits, not once an edit
    embed_later: bool = False


class WorkspaceService(BaseService):
    # -- naming and reading -----------------------------------------------------------------

    def space(self, caller: Caller) -> tuple[str, list[str]]:
        """The record id prefix of the caller's workspace, and the scopes its writes carry."""
        scopes = self.identity.write_scopes(caller, None)
        return f"{tags_key(scopes)}|", scopes

    def _file(self, caller: Caller, path: str) -> Item | None:
        prefix, _ = self.space(caller)
        item = self.records.get(caller.context_id, FILE, prefix + clean_path(path))
        if item is None or not can_see(item.data.get("scopes"), self.identity.read_lens(caller, None)):
            return None
        return item

    def file(self, caller: Caller, path: str) -> Item:
        item = self._file(caller, path)
        if item is None:
            raise NotFound(f"no file {path!r} in the workspace", code="file_not_found")
        return item

    def content(self, item: Item | dict[str, Any]) -> str:
        data = item.data if isinstance(item, Item) else item
        return self.blobs.get(data["blob_key"]).decode()

    def exists(self, caller: Caller, path: str) -> bool:
        return self._file(caller, path) is not None

    def paths(self, caller: Caller) -> list[str]:

        prefix, _ = self.space(caller)  # a file's id is the prefix and its path: no file needs reading
        return [i[len(prefix) :] for i in self.records.ids(caller.context_id, FILE, prefix, limit=2**62)]

    def file_count(self, caller: Caller) -> int:
        """How many files the caller's workspace holds (as many as `paths`), without reading them."""
        prefix, _ = self.space(caller)
        return self.records.count(caller.context_id, FILE, prefix)

    def history(self, caller: Caller, path: str, limit: int, before: int | None = None) -> list[Item]:
        item = self.file(caller, path)
        return self.records.history_page(caller.context_id, FILE, item.id, before, limit)

    # -- writing ----------------------------------------------------------------------------

    def write(self, caller: Caller, new: NewFile) -> dict[str, Any]:
        path = clean_path(new.path)
        raw = new.content.encode()
        if len(raw) > MAX_FILE_BYTES:
            raise InvalidInput(f"content is {len(raw)} bytes; the limit is {MAX_FILE_BYTES}", code="payload_too_large")
        if not new.reason.strip():
            raise InvalidInput("reason must say why the file changes", code="invalid_reason")
        lang = code.language(path)
        parsed = code.tree(path, new.content) if new.validate_syntax or new.update_dependencies else None
        if new.validate_syntax:
            problem = code.check(path, new.content, parsed)
            if problem is not None:
                raise InvalidInput(
                    problem.message,
                    code="syntax_error",
                    details={"line": problem.line, "column": problem.column, "language": lang},
                )
        specs = code.imports(path, new.content, parsed) if new.update_dependencies else []
        digest = blake3.blake3(raw).hexdigest()
        prefix, scopes = self.space(caller)

        def attempt() -> tuple[Item, Item | None, list[str]]:
            old = self.records.get(caller.context_id, FILE, prefix + path)
            blob_key = self._stored(caller.context_id, prefix + path, raw, digest)
            at = old.version if old else 0
            if new.expected_version is not None and new.expected_version != at:
                raise Conflict(f"{path!r} is at version {at}, expected {new.expected_version}", code="version_conflict")
            now = self.clock.now()
            known = set(self.paths(caller)) | {path} if specs else {path}  # no imports: nothing to resolve
            deps, external = (
                code.resolve(path, specs, lambda p: p in known, known)
                if new.update_dependencies
                else (list(old.data.get("deps", [])) if old else [], list(old.data.get("externals", [])) if old else [])
            )
            deps = deps[:MAX_GRAPH_ENTRIES]
            data = self._data(caller, path, text=new.content, blob_key=blob_key, digest=digest, specs=specs,
                              deps=deps, external=external, scopes=scopes, old=old, now=now, new=new)  # fmt: skip
            writes = [Write(caller.context_id, FILE, prefix + path, data, caller.actor, at)]
            writes += self._edges(caller, prefix, path, set(old.data.get("deps", [])) if old else set(), deps)
            # a large file is keyword-searchable at once and gets its vectors from a job due now
            embed = not new.embed_later and len(windows(new.content)) <= SYNC_EMBED_WINDOWS
            later = EMBED_LATER if new.embed_later else None
            payload: dict[str, Any] = {"context_id": caller.context_id, "ids": [prefix + path]}
            if new.embed_later:
                payload["version"] = at + 1  # a later version's own job embeds it: this one then has nothing to do
            vectors = [] if embed or self.embedder is None else [self.queue.job(INDEX_JOB, payload, now, later)]

            def reindex(i: Item) -> None:
                self._reindex(caller.context_id, [i], {i.id: new.content}, old, embed=embed)

            item = self._commit(caller.context_id, writes, [prefix + path], now, vectors, reindex)
            return item, old, external

        # with an expected version a conflict is the caller's (it decides what to write again); else retried
        item, old, external = attempt() if new.expected_version is not None else on_conflict(attempt, sleep=self.sleep)
        dependents = self.dependents(caller, path, 3)
        before = set(old.data.get("imports", [])) if old else set()
        changes = [f"added: {s}" for s in specs if s not in before] + [
            f"removed: {s}" for s in sorted(before - set(specs))
        ]
        backup = f"{path}.backup.{old.data['provenance']['timestamp']}" if old else None
        return {
            "item": item,
            "old": old,
            "backup_path": backup,
            "dependents": dependents,
            "changes": changes,
            "external": external,
        }

    def _stored(self, ctx: str, file_id: str, raw: bytes, digest: str) -> str:
        """The key of a file's bytes, stored unless there (a loser of the commit leaves its blob, named by the
        file and the bytes: nothing reads it). Looked at after the file's record is read: an erasure takes a
        file's blobs before its record, so a commit over the record it read fails when the blob was taken."""
        key = blob_key(ctx, file_id, digest)
        if not self.blobs.exists(key):
            self.blobs.put(key, raw, "text/plain; charset=utf-8")
        return key

    # fmt: off
    @staticmethod
    def _data(caller: Caller, path: str, *, text: str, blob_key: str, digest: str, specs: list[str], deps: list[str],
              external: list[str], scopes: list[str], old: Item | None, now: datetime, new: NewFile) -> dict[str, Any]:
        return {
            "path": path,
            "language": code.language(path),
            "blob_key": blob_key,
            "hash": digest,
            "bytes": len(text.encode()),
            "lines": text.count("\n") + (0 if text.endswith("\n") or not text else 1),
            "imports": bounded(specs),
            "deps": deps,
            "externals": bounded(external),
            "scopes": scopes,
            "created_at": old.data["created_at"] if old else iso(now),
            "chunks": len(windows(text)),
            "provenance": {
                "agent_id": new.agent_id,
                "principal": caller.principal.role,
                "key_id": caller.principal.key_id,
                "reason": new.reason,
                "timestamp": int(now.timestamp()),
                "contributors": list(new.contributors),
            },
        }
    # fmt: on

    def _commit(
        self,
        ctx: str,
        writes: list[Write],
        ids: list[str],
        now: datetime,
        jobs: Sequence[Write] = (),
        reindex: Callable[[Item], None] | None = None,
    ) -> Item:
        """The file's write and as many edge entries as one transaction of the store takes, committed with its
        safety net (`engram.kernel.unit_of_work`); a file with more edges gets the rest right after, carried by the
        safety net, so that a crash in between leaves them to it. Then `reindex`. Returns the file's item."""
        room = self.records.max_writes - 1 - len(jobs)
        first, rest = writes[:room], writes[room:]
        payload: dict[str, Any] = {"context_id": ctx, "ids": ids}
        if rest:
            payload["edges"] = [[w.id, w.data.get("source"), "remove" if w.remove else "add"] for w in rest]

        def finish(items: list[Item]) -> None:
            if rest:
                self._finish_edges(ctx, payload["edges"])
            if reindex is not None:
                reindex(items[0])

        uow = UnitOfWork(self.records, self.queue)
        return uow.commit(first, now, reindex=finish, net=(INDEX_JOB, payload), jobs=jobs)[0]

    def _finish_edges(self, ctx: str, edges: list[list[Any]]) -> None:
        """Reverse-edge entries a write committed past its first transaction: written if missing, removed if
        there (so the job may run them again after a crash)."""
        writes = []
        for id_, source, op in edges:
            if op == "remove":
                writes.append(Write(ctx, DEP, id_, {}, "system", None, remove=True))
            elif self.records.get(ctx, DEP, id_) is None:
                writes.append(Write(ctx, DEP, id_, {"source": source}, "system", None))
        step = max(1, self.records.max_writes)
        for i in range(0, len(writes), step):
            self.records.transact(writes[i : i + step], self.clock.now())

    @staticmethod
    def _edges(caller: Caller, prefix: str, path: str, before: set[str], deps: list[str]) -> list[Write]:
        """The reverse-edge entries that take a file's imports from `before` to `deps`."""
        ctx, actor = caller.context_id, caller.actor
        gone = [
            Write(ctx, DEP, f"{prefix}{d}{SEP}{path}", {}, actor, 1, remove=True) for d in sorted(before - set(deps))
        ]
        return gone + [Write(ctx, DEP, f"{prefix}{d}{SEP}{path}", {"source": path}, actor, 0)
                       for d in sorted(set(deps) - before)]  # fmt: skip

    def import_files(
        self,
        caller: Caller,
        files: Sequence[tuple[str, str]],
        reason: str,
        agent_id: str | None = None,
        progress: Any = None,
        batch: int = 64,
    ) -> dict[str, Any]:
        """Many files at once (`engram workspace import`): each a version written in its own transaction
        with its graph edges (resolved against the whole import), the index written a batch at a time (one
        embedding call for many windows): keyword search at once, vectors by a queued job (`queue.join()` waits
        for them). Each batch's safety-net job is committed before its files, so a crash leaves work to
        finish. A file that does not parse is imported all the same, marked `syntax_valid: false` (an import
        takes a tree as it is)."""
        prefix, _ = self.space(caller)
        clean = [(clean_path(p), t) for p, t in files]
        known = set(self.paths(caller)) | {p for p, _ in clean}
        done = failed = 0
        errors: list[dict[str, str]] = []
        uow = UnitOfWork(self.records, self.queue)
        for start in range(0, len(clean), batch):
            part = clean[start : start + batch]
            ids = [prefix + p for p, _ in part]

            def work(part: list[tuple[str, str]] = part) -> list[Write]:
                nonlocal done, failed
                items: list[Item] = []
                texts: dict[str, str] = {}
                previous: dict[str, int] = {}
                for path, text in part:
                    try:
                        item, chunks_before = self._import_one(caller, prefix, path=path, text=text, known=known,
                                                               reason=reason, agent_id=agent_id)  # fmt: skip
                    except InvalidInput as exc:
                        failed += 1
                        errors.append({"path": path, "error": exc.message})
                        continue
                    items.append(item)
                    texts[item.id] = text
                    previous[item.id] = chunks_before
                    done += 1
                # keyword search at once; the vectors by a job due now
                self._reindex(caller.context_id, items, texts, embed=False, previous=previous)
                if not items or self.embedder is None:
                    return []
                payload = {"context_id": caller.context_id, "ids": [i.id for i in items]}
                return [self.queue.job(INDEX_JOB, payload, self.clock.now())]

            uow.batch(self.clock.now(), (INDEX_JOB, {"context_id": caller.context_id, "ids": ids}), work)
            if progress is not None:
                progress(min(start + batch, len(clean)), len(clean))
        return {"imported": done, "failed": failed, "errors": errors[:50]}

    def _import_one(
        self, caller: Caller, prefix: str, *, path: str, text: str, known: set[str], reason: str, agent_id: str | None
    ) -> tuple[Item, int]:
        """The file written, and how many index windows its version before had."""
        raw = text.encode()
        if len(raw) > MAX_FILE_BYTES:
            raise InvalidInput(f"{len(raw)} bytes; the limit is {MAX_FILE_BYTES}")
        parsed = code.tree(path, text)
        specs = code.imports(path, text, parsed)
        deps, external = code.resolve(path, specs, lambda p: p in known, known)
        deps = deps[:MAX_GRAPH_ENTRIES]
        digest = blake3.blake3(raw).hexdigest()
        _, scopes = self.space(caller)
        valid = code.check(path, text, parsed) is None

        def attempt() -> tuple[Item, int]:
            old = self.records.get(caller.context_id, FILE, prefix + path)
            blob_key = self._stored(caller.context_id, prefix + path, raw, digest)
            now = self.clock.now()
            new = NewFile(path, text, reason, agent_id)
            data = self._data(caller, path, text=text, blob_key=blob_key, digest=digest, specs=specs, deps=deps,
                              external=external, scopes=scopes, old=old, now=now, new=new)  # fmt: skip
            data["syntax_valid"] = valid
            writes = [Write(caller.context_id, FILE, prefix + path, data, caller.actor, old.version if old else 0)]
            writes += self._edges(caller, prefix, path, set(old.data.get("deps", [])) if old else set(), deps)
            room = self.records.max_writes
            if len(writes) <= room:
                return self.records.transact(writes, now)[0], int(old.data.get("chunks", 0)) if old else 0
            # the batch's own job indexes it; this one only carries the edges past the first transaction
            return self._commit(caller.context_id, writes, [prefix + path], now), int(
                old.data.get("chunks", 0)
            ) if old else 0

        return on_conflict(attempt, sleep=self.sleep)

    # -- the graph --------------------------------------------------------------------------

    def deps_of(self, caller: Caller, path: str) -> list[str]:
        item = self._file(caller, path)
        return list(item.data.get("deps", [])) if item else []

    def dependents_of(self, caller: Caller, path: str) -> list[str]:
        return self._dependents(caller.context_id, self.space(caller)[0], path)

    def _dependents(self, ctx: str, prefix: str, path: str) -> list[str]:
        under = f"{prefix}{path}{SEP}"  # an edge's id names its importer: no edge needs reading
        return [i[len(under) :] for i in self.records.ids(ctx, DEP, under, limit=1000)]

    def walk(self, caller: Caller, start: str, depth: int, direction: str) -> dict[str, int]:
        """Breadth-first distances from `start` along imports (forward), importers (reverse) or both: one
        level at a time, the level's files read in one batch."""
        prefix, _ = self.space(caller)
        lens = self.identity.read_lens(caller, None)
        seen = {start: 0}
        level = [start]
        for d in range(1, depth + 1):
            if not level:
                break
            found: dict[str, Item] = {}
            ids = [prefix + clean_path(p) for p in level]
            if direction in ("forward", "bidirectional"):
                found = self.records.get_many(caller.context_id, FILE, ids)
            nxt: list[str] = []
            for here, id_ in zip(level, ids, strict=True):
                item = found.get(id_)
                if item is not None and can_see(item.data.get("scopes"), lens):
                    nxt += item.data.get("deps", [])
                if direction in ("reverse", "bidirectional"):
                    nxt += self._dependents(caller.context_id, prefix, here)
            level = []
            for n in nxt:
                if n not in seen:
                    seen[n] = d
                    level.append(n)
        return seen

    def dependents(self, caller: Caller, path: str, depth: int) -> list[str]:
        return sorted(p for p, d in self.walk(caller, path, depth, "reverse").items() if d > 0)

    # -- the index --------------------------------------------------------------------------

    def _reindex(
        self,
        ctx: str,
        items: Sequence[Item],
        texts: dict[str, str],
        old: Item | None = None,
        embed: bool = True,
        previous: dict[str, int] | None = None,
    ) -> None:
        """The files' windows in the index (with vectors unless `embed` is off: keyword search at once, the
        vectors left to a job); windows a shorter version no longer has are taken out."""
        docs: list[IndexDoc] = []
        for item in items:
            docs += chunk_docs(item, texts.get(item.id) or self.content(item))
        if embed and self.embedder is not None and docs:
            with embedding_errors():
                vectors = self.embedder.embed([d.text for d in docs])
            docs = [d.with_vector(v) for d, v in zip(docs, vectors, strict=True)]
        if docs:
            self.index.upsert(docs)
        before = dict(previous or {})
        if old is not None:
            before[old.id] = int(old.data.get("chunks", 0))
        for item in items:
            stale = [f"{item.id}#{n}" for n in range(int(item.data["chunks"]), before.get(item.id, 0))]
            if stale:
                self.index.delete(ctx, stale)

    def index_job(self, payload: dict[str, Any]) -> None:
        self.index_jobs([payload])

    def index_jobs(self, payloads: list[dict[str, Any]]) -> None:
        """Jobs waiting together: each file indexed once, from its latest version, however many of them
        asked for it (the edits of one document, embedded later). A run short of time (the Lambda worker)
        queues what it has not indexed as jobs of their own (an import's batch of files took longer to embed
        than the worker may run, and was cut off each time)."""
        by_context: dict[str, dict[str, int | None]] = {}
        for payload in payloads:
            ctx = payload["context_id"]
            if payload.get("edges"):
                self._finish_edges(ctx, payload["edges"])
            wanted = by_context.setdefault(ctx, {})
            for id_ in payload["ids"]:  # the newest version a job asked for (None: whatever is there)
                v, before = payload.get("version"), wanted.get(id_, 0)
                wanted[id_] = None if v is None or before is None else max(v, before)
        contexts = list(by_context.items())
        for n, (ctx, wanted) in enumerate(contexts):
            found = self.records.get_many(ctx, FILE, list(wanted))
            parts = slices([i for i in found.values() if (v := wanted[i.id]) is None or i.version <= v], EMBED_SLICE)
            for k, part in enumerate(parts):
                self._reindex(ctx, part, {})
                if not past_hand_over():
                    continue
                rest = [(ctx, [i.id for p in parts[k + 1 :] for i in p]), *[(c, list(w)) for c, w in contexts[n + 1 :]]]
                jobs = [self.queue.job(INDEX_JOB, {"context_id": c, "ids": ids}, self.clock.now())
                        for c, ids in rest if ids]  # fmt: skip
                if jobs:  # out of time: the rest in jobs of their own
                    UnitOfWork(self.records, self.queue).commit([], self.clock.now(), jobs=jobs)
                    return

    def query_vector(self, query: str, mode: SearchMode) -> Vector | None:
        """The query's vector for a search in `mode` (bm25 too: its scores weigh both evidences)."""
        return query_vector(self.embedder, query, ranks=mode != "bm25")

    def search_chunks(
        self,
        caller: Caller,
        query: str,
        mode: SearchMode,
        k: int,
        kinds: tuple[str, ...] = (CHUNK,),
        vector: Vector | Literal["embed"] | None = "embed",
    ) -> list[Hit]:
        """Windows (and decisions) by `query`; `vector` the query's, when the caller has it already."""
        if isinstance(vector, str):
            vector = self.query_vector(query, mode)
        lens = self.identity.read_lens(caller, None)
        q = SearchQuery(caller.context_id, query, vector, "bm25" if vector is None else mode, k, kinds, lens)
        return self.index.search(q, self.clock.now())


__all__ = ["NewFile", "WorkspaceService"]
