"""A running local server's data folder copied consistently (`engram backup`) and put back (`engram restore`).

Each SQLite store (records, search, audit, counters) is copied with SQLite's online backup API, not as a file: the
copy is the database as one transaction saw it, taken while writers go on (in WAL mode a reader blocks no writer;
the copy is made in one step, since a step-wise copy starts again whenever another connection writes). Blobs are
files written once under new names and never changed in place, so they are copied as files, after the databases:
a blob written meanwhile is one nothing in the copy names yet; one erased meanwhile is one the copy should not
have. Each database is consistent in itself; the search index is made from the records, so `restore` makes it
again from them (`engram.search.reindex.rebuild`) unless told not to.

`MANIFEST` in the backup folder lists what was copied, with sizes and SHA-256s, and `restore` checks it first.
The standard library's `sqlite3.Connection.backup`, `shutil` and `hashlib` do the work; what is written here is
only the order and the manifest.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram.kernel.errors import InvalidInput

MANIFEST = "engram-backup.json"
FORMAT = "engram-backup"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def backup(data_dir: Path, to: Path) -> dict[str, Any]:
    """Copy `data_dir` into the new folder `to` (refused if it exists and is not empty)."""
    if not (data_dir / "records.db").exists():
        raise InvalidInput(f"{data_dir} holds no Engram data (no records.db)")
    if to.exists() and any(to.iterdir()):
        raise InvalidInput(f"{to} is not empty: a backup goes into a new folder")
    to.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    files: dict[str, dict[str, Any]] = {}
    # the search index first: it is made from the records, so a copy of it older than theirs indexes nothing the
    # records' copy lacks (a write between the two copies is in the records' copy alone: the restore's rebuild
    # indexes it); copied after them, it held writes the records' copy missed, and no rebuild removes those
    for db in sorted(data_dir.glob("*.db"), key=lambda d: (d.name != "search.db", d.name)):
        source = sqlite3.connect(db)
        source.execute("PRAGMA busy_timeout=10000")
        target = sqlite3.connect(to / db.name)
        try:
            source.backup(target)  # one step: the database as one read transaction sees it
            target.execute("PRAGMA journal_mode=DELETE")  # the copy is one file, no log beside it
        finally:
            target.close()
            source.close()
    dbs_done = time.perf_counter() - started
    for blob in sorted(p for p in (data_dir / "blobs").rglob("*") if p.is_file()):
        copy = to / blob.relative_to(data_dir)
        copy.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(blob, copy)
        except FileNotFoundError:
            continue  # erased while the copy ran: the databases copied do not name it either, or should not
    for path in sorted(p for p in to.rglob("*") if p.is_file()):
        rel = path.relative_to(to).as_posix()
        files[rel] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    manifest = {
        "format": FORMAT,
        "version": 1,
        "taken_at": datetime.now(UTC).isoformat(),
        "source": str(data_dir),
        "files": files,
        "bytes": sum(f["size"] for f in files.values()),
        "seconds": round(time.perf_counter() - started, 3),
        "databases_seconds": round(dbs_done, 3),
    }
    (to / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def check(src: Path) -> dict[str, Any]:
    """The backup's manifest, every file in it checked (size, SHA-256) and every database's integrity."""
    try:
        manifest: dict[str, Any] = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{src} is not an Engram backup (no readable {MANIFEST})") from exc
    if manifest.get("format") != FORMAT:
        raise InvalidInput(f"{src} is not an Engram backup")
    for rel, want in manifest["files"].items():
        path = src / rel
        if not path.is_file() or path.stat().st_size != want["size"] or _sha256(path) != want["sha256"]:
            raise InvalidInput(f"the backup's {rel} is missing or changed since it was taken")
        if rel.endswith(".db"):
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
            finally:
                conn.close()
            if ok != "ok":
                raise InvalidInput(f"the backup's {rel} fails SQLite's integrity check: {ok}")
    return manifest


def restore(src: Path, data_dir: Path, force: bool = False) -> dict[str, Any]:
    """Put a checked backup in `data_dir` (the server stopped). A folder holding data is replaced only with
    `force`; what it held is moved aside (`<data_dir>.before-restore-<time>`), never deleted."""
    manifest = check(src)
    aside = None
    if data_dir.exists() and any(data_dir.iterdir()):
        if not force:
            raise InvalidInput(f"{data_dir} holds data: stop the server, then restore with --force (it is kept aside)")
        aside = data_dir.with_name(f"{data_dir.name}.before-restore-{datetime.now(UTC):%Y%m%dT%H%M%SZ}")
        data_dir.rename(aside)
    data_dir.mkdir(parents=True, exist_ok=True)
    for rel in manifest["files"]:
        target = data_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, target)
    return {"restored": len(manifest["files"]), "bytes": manifest["bytes"], "taken_at": manifest["taken_at"],
            "kept_aside": str(aside) if aside else None}  # fmt: skip
