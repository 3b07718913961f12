"""A whole context taken out and brought back (`engram export` / `engram import`, the `context_export` job).

The format (`FORMAT`, version `VERSION`) is JSON Lines, gzip-compressed, one JSON object a line, written and read
as a stream (memory stays flat whatever the context's size):

- `{"t": "header", "format": "engram-export", "version": 1, "context", "exported_at", "model", "dim", "audit"}`:
  `model` / `dim` name the embedding model the vectors below were made with (None: none were).
- `{"t": "object", "kind", "id", "created_at", "expires_at", "versions": [{"v", "data", "actor", "at"}, ...]}`:
  every object of every kind the context holds (records, documents, turns and facts with their validity windows,
  entities and edges, files, threads, schemas, registered scopes, quotas, the context's key of ids made from
  words, erasure receipts...), each with its whole history, oldest version first. Expired objects not yet swept
  are kept with their `expires_at`.
- `{"t": "blob", "key", "data"}`: the bytes a version names (`blob_key`: a document's file, a code file), base64.
- `{"t": "doc", "kind", "id", "text", "scopes", "valid_from", "valid_until", "metadata", "vector"}`: the context's
  search index, each document with its vector (base64 of little-endian float32, or None).
- `{"t": "audit", "seq", "at", "data", "prev", "hash"}` (with `--audit`): the context's audit trail, for the
  record (an import appends one `context_import` entry to the target's own chain; it does not replay another
  chain's entries, whose hashes are sealed with another deployment's key).
- `{"t": "end", "objects", "blobs", "docs", "audit"}`: the counts; a file without it is incomplete and refused.

An import writes each object as the file has it (`RecordStore.restore`: same versions, actors and times) unless the
target already has it, so importing twice changes nothing and an import that was stopped starts again where its
checkpoint says (`<file>.state`, written after each batch commits). Index documents are put back with their
vectors when the target embeds with the same model; with another model (or a file without them) the context's
index is made again from the imported objects (`engram.search.reindex.rebuild`: embedded again).

Written by hand: no library knows Engram's objects; the file layers are the standard library's (`gzip`, `json`).
"""

from __future__ import annotations

import base64
import gzip
import json
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from engram.kernel.clock import iso, parse_time
from engram.kernel.errors import InvalidInput, NotFound
from engram.kernel.kinds import Kinds
from engram.kernel.ports import IndexDoc, Item
from engram.kernel.scan import every

if TYPE_CHECKING:
    from engram.wiring import Engram

FORMAT = "engram-export"
VERSION = 1
SKIPPED_KINDS = frozenset({"job", "key", "transfer"})  # work in flight, credentials, this deployment's transfers
UNTRUSTED_KINDS = frozenset({"issuer", "quota"})  # the operator's settings of a context: not from a manager's file
BATCH = 200  # objects (or index documents) a write takes at once
Progress = Callable[[str, int], None]  # (what: objects / blobs / docs / audit, how many so far)


@dataclass
class Counts:
    objects: int = 0
    blobs: int = 0
    docs: int = 0
    audit: int = 0
    written: int = 0  # objects an import wrote (the rest the target had already)
    bytes: int = 0
    seconds: float = 0.0
    reindexed: bool = False
    skipped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def _vector(v: Any) -> str | None:
    return None if v is None else base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()


def _unvector(s: str | None) -> np.ndarray[Any, Any] | None:
    return None if s is None else np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float32)


def _model(root: Engram) -> tuple[str | None, int | None]:
    e = root.embedder
    return (None, None) if e is None else (str(e.model_id), int(e.dim))


def lines(
    root: Engram, context_id: str, audit: bool = False, progress: Progress | None = None
) -> Iterator[dict[str, Any]]:
    """The export of a context, line by line (`FORMAT`)."""
    model, dim = _model(root)
    yield {"t": "header", "format": FORMAT, "version": VERSION, "context": context_id,
           "exported_at": iso(root.clock.now()), "model": model, "dim": dim, "audit": audit}  # fmt: skip
    n = {"objects": 0, "blobs": 0, "docs": 0, "audit": 0}

    def tick(what: str) -> None:
        n[what] += 1
        if progress is not None and n[what] % 500 == 0:
            progress(what, n[what])

    for kind in sorted(k for k in root.kinds if k not in SKIPPED_KINDS):
        for latest in every(root.records, context_id, kind):
            versions = root.records.history(context_id, kind, latest.id) or [latest]
            yield {
                "t": "object", "kind": kind, "id": latest.id, "created_at": iso(versions[0].created_at),
                "expires_at": iso(latest.expires_at),
                "versions": [{"v": v.version, "data": v.data, "actor": v.actor, "at": iso(v.updated_at)}
                             for v in versions],
            }  # fmt: skip
            tick("objects")
            for key in dict.fromkeys(str(v.data["blob_key"]) for v in versions if v.data.get("blob_key")):
                try:
                    data = root.blobs.get(key)
                except NotFound:
                    continue  # a version whose bytes an erasure took
                yield {"t": "blob", "key": key, "data": base64.b64encode(data).decode()}
                tick("blobs")
    after: str | None = None
    while True:
        docs = root.index.documents(context_id, after, 500)
        for d in docs:
            yield {"t": "doc", "kind": d.kind, "id": d.id, "text": d.text, "scopes": list(d.scopes),
                   "valid_from": iso(d.valid_from), "valid_until": iso(d.valid_until),
                   "metadata": dict(d.metadata), "vector": _vector(d.vector)}  # fmt: skip
            tick("docs")
        if len(docs) < 500:
            break
        after = docs[-1].id
    if audit and root.audit_log is not None:
        seq = 0
        while True:
            entries = root.audit_log.entries(context_id, after=seq, limit=1000)
            for e in entries:
                yield {"t": "audit", "seq": e.seq, "at": iso(e.at), "data": e.data, "prev": e.prev, "hash": e.hash}
                tick("audit")
            if len(entries) < 1000:
                break
            seq = entries[-1].seq
    yield {"t": "end", **n}


def export(
    root: Engram, context_id: str, out: IO[bytes], audit: bool = False, progress: Progress | None = None
) -> Counts:
    """Write the context's export to `out` (gzip of JSON Lines)."""
    started = time.perf_counter()
    counts = Counts()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=5) as gz:
        for line in lines(root, context_id, audit, progress):
            raw = json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
            gz.write(raw)
            counts.bytes += len(raw)
            if line["t"] == "end":
                counts.objects, counts.blobs = line["objects"], line["blobs"]
                counts.docs, counts.audit = line["docs"], line["audit"]
    counts.seconds = time.perf_counter() - started
    return counts


def _blob(key: str, source: str, target: str) -> str:
    """A blob's key in the target: under the source context's prefix in the file (refused otherwise: a file naming
    another context's blob would have this one's objects point at it), under the target's here."""
    if not key.startswith(f"{source}/"):
        raise InvalidInput(f"the export names a blob outside its context: {key[:80]!r}")
    return f"{target}/{key[len(source) + 1 :]}"


def _moved(versions: list[Item], source: str, target: str) -> list[Item]:
    """An object's versions with the blobs they name moved to the target context's keys (`_blob`)."""
    for v in versions:
        if isinstance(v.data.get("blob_key"), str):
            v.data["blob_key"] = _blob(v.data["blob_key"], source, target)
    return versions


def _item(kinds: Kinds, context_id: str, line: dict[str, Any]) -> list[Item]:
    """An object line's versions as items, checked: a declared kind, an id, versions in increasing order, data."""
    kind, id_, versions = line["kind"], line["id"], line["versions"]
    created = parse_time(line["created_at"])
    if kind not in kinds or kind in SKIPPED_KINDS:
        raise InvalidInput(f"an export holds no {str(kind)[:40]!r} objects")
    if not isinstance(id_, str) or not 0 < len(id_) <= 1024:
        raise ValueError("id")
    if not isinstance(versions, list) or not versions or created is None:
        raise ValueError("versions")
    out: list[Item] = []
    for n, v in enumerate(versions, 1):  # increasing numbers (an erasure may have squashed the early ones)
        at, number = parse_time(v["at"]), v["v"]
        if at is None or type(number) is not int or number <= (out[-1].version if out else 0):
            raise ValueError("version")
        if not isinstance(v["data"], dict) or (kinds[kind].access == "scoped" and not v["data"].get("scopes")):
            raise ValueError("data")
        expires = parse_time(line.get("expires_at")) if n == len(versions) else None
        out.append(Item(context_id, kind, id_, number, dict(v["data"]), str(v["actor"]), created, at, expires))
    return out


def _doc(kinds: Kinds, context_id: str, line: dict[str, Any]) -> IndexDoc:
    """An index document line, checked: a kind that is indexed, text, scopes, scalar metadata."""
    kind, id_, text, scopes, meta = line["kind"], line["id"], line["text"], line["scopes"], line.get("metadata") or {}
    if kind not in kinds or not kinds[kind].indexed or not isinstance(id_, str) or not isinstance(text, str):
        raise ValueError("doc")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(x, str) for x in scopes):
        raise ValueError("scopes")
    if not isinstance(meta, dict) or not all(isinstance(v, str | int | float | bool) for v in meta.values()):
        raise ValueError("metadata")
    vector = _unvector(line.get("vector"))
    return IndexDoc(context_id, kind, id_, text, vector, tuple(scopes), parse_time(line.get("valid_from")),
                    parse_time(line.get("valid_until")), meta)  # fmt: skip


def _gzip_lines(gz: gzip.GzipFile) -> Iterator[bytes]:
    """The file's lines; a file that is not gzip, or is cut short, is the caller's error."""
    try:
        yield from gz
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidInput(f"not an Engram export: not gzip, or cut short ({type(exc).__name__})") from None


def read_lines(src: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The lines of an export, checked for the format and version first."""
    with gzip.GzipFile(fileobj=src, mode="rb") as gz:
        first = True
        for raw in _gzip_lines(gz):
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise InvalidInput("not an Engram export: a line is not JSON") from exc
            if not isinstance(line, dict):
                raise InvalidInput("not an Engram export: a line is not a JSON object")
            if first:
                if line.get("t") != "header" or line.get("format") != FORMAT:
                    raise InvalidInput("not an Engram export (no engram-export header)")
                if line.get("version") != VERSION:
                    raise InvalidInput(
                        f"an export of format version {line.get('version')}; this Engram reads {VERSION}"
                    )
                first = False
            yield line


def load(
    root: Engram,
    src: IO[bytes],
    state: Path | None = None,
    progress: Progress | None = None,
    rebuild_index: bool = True,
    into: str | None = None,
    trusted: bool = True,
) -> Counts:
    """Import an export into the target `root`: into the context the file names, or `into`. `state`: the
    checkpoint file (an import stopped resumes after the last batch it committed; removed when the import ends).

    A file is checked as it is read (a hostile one is refused with the line it failed at; what it committed
    before stays, as a stopped import's does): every blob it names lies under its own context's prefix (moved to
    the target's), no object is of a kind no export holds (keys, jobs), and with `trusted` off (a context's
    manager importing through the API, not the operator at the command line) the deployment's own settings of
    the context — the OAuth issuers it trusts (`oauth_trust` checks those), its quotas (the operator's) — are
    skipped, not taken from the file."""
    from engram.search.reindex import rebuild

    started = time.perf_counter()
    done = json.loads(state.read_text())["line"] if state is not None and state.exists() else 0
    counts = Counts()
    model, dim = _model(root)
    objects: list[list[Item]] = []
    docs: list[IndexDoc] = []
    context_id = source = ""
    same_model = True
    ended: dict[str, Any] | None = None

    def flush(n: int) -> None:
        if objects:
            counts.written += root.records.restore(context_id, objects)
            objects.clear()
        if docs:
            root.index.upsert(docs)
            docs.clear()
        if state is not None:
            state.write_text(json.dumps({"line": n}))

    n = 0
    for n, line in enumerate(read_lines(src)):
        t = line.get("t")
        if t == "header":
            named = line.get("context")
            if not isinstance(named, str) or not 0 < len(named) <= 256:
                raise InvalidInput("the export's header names no context")
            source = named
            context_id = into or source
            same_model = (line.get("model"), line.get("dim")) == (model, dim)
            continue
        if t == "end":
            ended = line
            continue
        if n < done:  # committed by the import that was stopped
            counts.objects += t == "object"
            continue
        try:
            if t == "object" and not trusted and line.get("kind") in UNTRUSTED_KINDS:
                counts.objects += 1
                counts.skipped[str(line["kind"])] = counts.skipped.get(str(line["kind"]), 0) + 1
                continue
            if t == "object":
                objects.append(_moved(_item(root.kinds, context_id, line), source, context_id))
                counts.objects += 1
            elif t == "blob":
                key = _blob(str(line["key"]), source, context_id)
                if not root.blobs.exists(key):
                    root.blobs.put(key, base64.b64decode(line["data"], validate=True))
                counts.blobs += 1
            elif t == "doc":
                counts.docs += 1
                if same_model:
                    docs.append(_doc(root.kinds, context_id, line))
            elif t == "audit":
                counts.audit += 1
            else:
                counts.skipped[str(t)] = counts.skipped.get(str(t), 0) + 1
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInput(f"line {n + 1} of the export is not what its format says ({type(exc).__name__})",
                               details={"line": n + 1}) from None  # fmt: skip
        if len(objects) >= BATCH or len(docs) >= BATCH:
            flush(n + 1)
        if progress is not None and (counts.objects + counts.docs) % 500 == 0:
            progress("objects", counts.objects + counts.docs)
    if ended is None or ended.get("objects") != counts.objects:
        raise InvalidInput("the export is incomplete (its end line is missing or counts otherwise): export it again")
    flush(n + 1)
    if not same_model and rebuild_index and counts.docs:
        rebuild(root, context_id)
        counts.reindexed = True
    root.audit.record(context_id, key_id="system", principal="system", tool="context_import", transport="cli",
                      objects_=[], outcome="ok", cost={"objects": float(counts.written)})  # fmt: skip
    if state is not None:
        state.unlink(missing_ok=True)
    counts.seconds = time.perf_counter() - started
    return counts


def import_file(root: Engram, path: Path, progress: Progress | None = None) -> Counts:
    """`load` of a file, its checkpoint beside it (`<file>.state`)."""
    with path.open("rb") as src:
        return load(root, src, path.with_name(path.name + ".state"), progress)
