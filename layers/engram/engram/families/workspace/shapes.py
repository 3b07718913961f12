"""The workspace's names and bounds: record kinds, a clean path, a file's windows, what a record keeps of its
imports, time windows."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import blake3

from engram.kernel.errors import InvalidInput
from engram.kernel.ports import IndexDoc, Item

FILE, DEP, CHUNK = "wfile", "wdep", "wchunk"
SAFETY_NET = timedelta(seconds=30)
MAX_FILE_BYTES = 1024 * 1024
MAX_PATH = 1024
WINDOW_LINES = 60
# A write embeds its windows before it answers when they are this few (semantic search finds a small file at
# once); a larger file is keyword-searchable at once and gets its vectors from a queued job, so a write's time
# does not grow with the model's work (a 1 MiB file: ~1,000 windows, half a minute of embedding here).
SYNC_EMBED_WINDOWS = 8
# A file written with `embed_later` (sync_document's) gets its vectors from a job due this much later, so that
# the edits of a burst share one embedding of the document's last version.
EMBED_LATER = timedelta(seconds=2)
EMBED_SLICE = 256  # windows a background job embeds at a time: a run short of time hands over between slices
# What a file's record keeps of its imports (the whole list stays derivable from its content): at most so many
# entries and bytes each, so that the record fits any store's item (DynamoDB: 400 KB) whatever the file.
MAX_GRAPH_ENTRIES = 1000
MAX_GRAPH_BYTES = 64 * 1024


def bounded(names: Sequence[str]) -> list[str]:
    """`names` cut to MAX_GRAPH_ENTRIES entries and MAX_GRAPH_BYTES bytes (a name over 512 characters: cut)."""
    out, size = [], 0
    for name in names[:MAX_GRAPH_ENTRIES]:
        name = name[:512]
        size += len(name.encode()) + 4
        if size > MAX_GRAPH_BYTES:
            break
        out.append(name)
    return out


SEP = "\x1f"
_REFUSED = re.compile(r"[\x00-\x1f\\]")  # control characters and backslashes


def clean_path(path: str) -> str:
    """A workspace path: relative, normalised, inside the workspace. `..`, absolute paths, NUL bytes,
    backslashes and control characters are refused."""
    if not path or len(path) > MAX_PATH:
        raise InvalidInput(f"path must be 1 to {MAX_PATH} characters", code="invalid_path")
    if _REFUSED.search(path):
        raise InvalidInput("path holds a control character or a backslash", code="invalid_path")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise InvalidInput(
            f"{path!r}: absolute paths are refused; give a path inside the workspace", code="invalid_path"
        )
    norm = posixpath.normpath(path)
    if norm in (".", "") or norm == ".." or norm.startswith("../") or ".." in path.split("/"):
        raise InvalidInput(f"{path!r} leaves the workspace", code="invalid_path")
    return norm


def windows(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each window of WINDOW_LINES lines."""
    lines = text.splitlines()
    return [(i + 1, "\n".join(lines[i : i + WINDOW_LINES])) for i in range(0, max(1, len(lines)), WINDOW_LINES)]


def unix(t: datetime) -> int:
    return int(t.timestamp())


def parse_window(text: str) -> timedelta:
    """`1h`, `24h`, `7d`, `30m`, `90s` as a time span."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise InvalidInput(f"time range {text!r}: give a number and a unit (s, m, h, d, w), e.g. 24h")
    return timedelta(seconds=int(text[:-1]) * units[text[-1]])


def first(values: Iterable[str]) -> str | None:
    return next(iter(values), None)


def chunk_docs(item: Item, text: str) -> list[IndexDoc]:
    """A file's windows as index documents: the path heads each window's text (a path's words find its file)."""
    d = item.data
    out = []
    for n, (line, body) in enumerate(windows(text)):
        meta: dict[str, str | int | float | bool] = {
            "path": d["path"],
            "file_id": item.id,
            "line": line,
            "language": d["language"] or "",
        }
        out.append(
            IndexDoc(
                item.context_id,
                CHUNK,
                f"{item.id}#{n}",
                f"{d['path']}\n{body}",
                None,
                d["scopes"],
                None,
                None,
                meta,
            )
        )
    return out


def slices(files: Sequence[Item], size: int) -> list[list[Item]]:
    """Files in slices of up to `size` windows (a file with more is a slice of its own)."""
    out: list[list[Item]] = []
    windows = size
    for item in files:
        n = int(item.data.get("chunks") or 0)
        if out and windows + n <= size:
            out[-1].append(item)
            windows += n
        else:
            out.append([item])
            windows = n
    return out


def blob_key(context_id: str, file_id: str, digest: str) -> str:
    """Where a file's bytes are stored: named by the file and their hash, so a version that returns to earlier
    bytes shares their blob and another file never does — erasing a file's blobs cannot take bytes another
    file refers to, or is about to. Keys written before, `{context}/ws/{hash}`, are shared by every file of
    the context with the same bytes (`context_wide`)."""
    return f"{context_id}/ws/{blake3.blake3(file_id.encode()).hexdigest()[:32]}/{digest}"


def context_wide(key: str) -> bool:
    """Whether a blob key is of the older kind, shared by every file of the context with the same bytes."""
    return "/" not in key.rpartition("/ws/")[2]
