"""A large context's index saved beside the SQLite file, opened memory-mapped on the next start (issue #54).

A segment is what `Slots` held at one change of the context (`seq`): per slot its id, SQLite rowid, length, scope tag
set, validity and whether it has a vector; the vectors as float32 (float16 halved the file but made an exact product 6x
slower: numpy multiplies only float32 with BLAS; only the rows a query touches are paged in); BM25's postings as CSR
arrays (a term's slots and frequencies side by side); the approximate graph (`ann`) with the slot of each of its nodes.
A process that opens it keeps those slots as they are — their rows are read from SQLite only when a search returns them,
their postings and vectors paged in from the files as queries touch them — and applies the changes logged after `seq` on
top (`Slots`'s own structures, as for a small context). A million memories open in seconds instead of being parsed and
tokenised again (81.6 s), and no Python object is made for a row until it is returned.

Files (numpy's own format, JSON, faiss's index format) live in `<index file>.segments/<sha-256 of the context>/
<seq>-<random>/`: a segment is written to a temporary directory and renamed into place, so a reader sees a whole one
or none; anything unreadable is ignored (the context loads from SQLite). An erasure removes every segment
(`remove_all`): they hold vectors, stems and ids of what was erased. Written by hand: no library keeps this layout.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import functools
import hashlib
import json
import mmap
import os
import secrets
import shutil
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from engram.kernel.load import usable_cpus

FORMAT = 1
BLOCK = 65_536  # vectors written this many at a time
RELEASE = 16  # searches between two unmappings of the pages they touched (`Segment.release`)
Array = np.ndarray[Any, np.dtype[Any]]  # ids, counts and masks as well as vectors
_ARRAYS = ("rowids", "lengths", "tags", "valid_from", "valid_until", "has_vec", "offsets", "post_slots", "post_tfs")


@dataclass
class Segment:
    seq: int
    ids: list[str]  # "" for a free slot
    rowids: Array  # int64; -1 for a free slot
    lengths: Array
    tags: Array
    valid_from: Array
    valid_until: Array
    has_vec: Array
    vectors: Array | None  # float32 [n, dim], memory-mapped
    vocab: dict[str, int]
    offsets: Array  # int64 [terms + 1]
    post_slots: Array  # int32, ascending within a term
    post_tfs: Array  # float32
    pages: list[tuple[int, int, str]]
    tag_sets: list[tuple[str, ...]]
    total_length: float
    graph: Any = None  # a faiss index, or None
    graph_slots: Array | None = None
    graph_keys: Array | None = None  # each node's key (`ann.keys_of`)
    graph_twins: Array | None = None  # (node, slot) pairs: slots whose vector is the node's
    masks: dict[tuple[str, frozenset[Any]], Any] = field(default_factory=dict)  # metadata masks (rows never change)
    # the memory maps of the vectors and postings (`release`); the arrays above are plain views of the files: a
    # numpy memmap's indexing runs in Python (~20 us a read: 7 ms of a recall at 1M)
    maps: list[Any] = field(default_factory=list)  # kept open while the views are used
    searches: int = 0
    releasing: threading.Thread | None = None
    file: Any = None  # the vectors' file, for `rows` (unbuffered)
    start: int = 0  # where its first vector starts
    by_rowid: tuple[Array, Array] | None = None  # the slots in rowid order, and their rowids (`slots_of`)

    @property
    def n(self) -> int:
        return len(self.ids)

    def posting(self, term: str) -> tuple[Array, Array]:
        t = self.vocab.get(term)
        if t is None:
            return _EMPTY_SLOTS, _EMPTY_TFS
        start, end = int(self.offsets[t]), int(self.offsets[t + 1])
        return self.post_slots[start:end], self.post_tfs[start:end]

    def mask(
        self,
        key: str,
        values: frozenset[Any],
        metadata: Callable[[str, frozenset[Any]], Iterator[tuple[int, dict[str, Any]]]] | None,
        keeps: Callable[[Any, frozenset[Any]], bool],
    ) -> Array:
        """`Slots.matching`'s mask over these slots: a kind (key "") from the pages; a metadata value read once from
        SQLite (`metadata`: each rowid and metadata of the rows that may hold one of `values` under `key`) and kept: a
        segment's rows never change (a changed one dies)."""
        found: Array | None = self.masks.get((key, values))
        if found is not None:
            return found
        mask = np.zeros(self.n, dtype=bool)
        if key == "":
            for start, end, kind in self.pages:
                mask[start:end] = kind in values
        elif metadata is not None:
            mask[self.slots_of(key, values, metadata, keeps)] = True
        if len(self.masks) > 64:
            self.masks.clear()
        self.masks[(key, values)] = mask
        return mask

    def slots_of(
        self,
        key: str,
        values: frozenset[Any],
        metadata: Callable[[str, frozenset[Any]], Iterator[tuple[int, dict[str, Any]]]],
        keeps: Callable[[Any, frozenset[Any]], bool],
    ) -> Array:
        """The slots (ascending) whose metadata `key` is one of `values`, from the rows SQLite gives (`mask`'s)."""
        if self.by_rowid is None:  # once: a segment's rows never change
            order = np.argsort(np.asarray(self.rowids), kind="stable")
            self.by_rowid = order, np.asarray(self.rowids)[order]
        order, ranked = self.by_rowid
        want = np.fromiter((r for r, meta in metadata(key, values) if keeps(meta.get(key), values)), dtype=np.int64)
        if not want.shape[0] or not ranked.shape[0]:
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(np.searchsorted(ranked, want), ranked.shape[0] - 1)
        return np.sort(order[at[ranked[at] == want]])

    def release(self) -> None:
        """Every RELEASE searches, unmap the file pages they touched (they stay in the page cache): random reads of
        vectors and postings would otherwise map, a few pages at a time, the whole files into the process (its RSS).
        In a thread of its own, through libc (ctypes lets go of the interpreter's lock: the call walks the whole
        mapping, ~5 ms at 1M, and no search waits for it)."""
        self.searches += 1
        if self.searches % RELEASE or _MADVISE is None or (self.releasing is not None and self.releasing.is_alive()):
            return
        regions = [(arr.ctypes.data, arr.nbytes) for arr in (self.vectors, self.post_slots, self.post_tfs)
                   if arr is not None and arr.nbytes]  # fmt: skip
        self.releasing = threading.Thread(target=_unmap, args=(regions, self.maps), daemon=True)
        self.releasing.start()

    def product(self, start: int, end: int, qv: Any) -> Any:
        """Cosines of vectors [start, end) with `qv`, BLOCK rows at a time, each block's pages unmapped after it: a
        product over every vector (a query the graph cannot answer) would otherwise map the whole file at once. The
        blocks are shared between a thread a core (BLAS runs on one: `engram.wiring.one_blas_thread`; these wait
        on a queue, they do not spin): 1M vectors ~0.3 s on one core, half that on two."""
        assert self.vectors is not None
        vectors, out = self.vectors, np.empty(end - start, dtype=np.float32)

        def one(at: int) -> None:
            block = vectors[at : min(end, at + BLOCK)]
            out[at - start : at - start + block.shape[0]] = block @ qv
            self.drop(at, at + block.shape[0])

        blocks = range(start, end, BLOCK)
        if len(blocks) > 1:
            list(_blocks_pool().map(one, blocks))
        elif blocks:
            one(blocks[0])
        return out

    def rows(self, slots: Array) -> Array:
        """The vectors of `slots`, read from the file rather than through its map: the page cache holds the file in
        large folios, and a fault maps a whole one (2 MB for one 1.5 KB row here), so a search's few hundred scattered
        rows through the map put most of the file into the process (80 MB of 154 at 100k, one search)."""
        assert self.vectors is not None
        out = np.empty((slots.shape[0], self.vectors.shape[1]), dtype=np.float32)
        if self.file is None or not out.size:
            out[:] = self.vectors[slots]
            return out
        width, fd = out.shape[1] * 4, self.file.fileno()
        view = out.data.cast("B")
        for j, slot in enumerate(slots.tolist()):
            os.preadv(fd, [view[j * width : (j + 1) * width]], self.start + slot * width)
        return out

    def drop(self, start: int, end: int) -> None:
        """Unmap the pages of vectors [start, end) (read once, by a graph's build or a save: they stay in the page
        cache, out of the process's RSS)."""
        if self.vectors is not None and _MADVISE is not None and start < self.vectors.shape[0]:
            block = self.vectors[start : min(end, self.vectors.shape[0])]
            _unmap([(block.ctypes.data, block.nbytes)], self.maps)

    def kind(self, slot: int) -> str:
        """The kind of the page holding `slot`."""
        starts = [start for start, _, _ in self.pages]
        return self.pages[bisect.bisect_right(starts, slot) - 1][2]


@functools.cache
def _blocks_pool() -> ThreadPoolExecutor:
    """The threads a product over many blocks shares them with (one a core the process may run on)."""
    return ThreadPoolExecutor(max_workers=usable_cpus(), thread_name_prefix="engram-blocks")


def _libc_madvise() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.madvise
    except (OSError, AttributeError):  # no libc with madvise (Windows): pages stay mapped
        return None
    call.argtypes, call.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return call


_MADVISE = _libc_madvise()
_PAGE = mmap.PAGESIZE


def _unmap(regions: list[tuple[int, int]], maps: list[Any]) -> None:
    """MADV_DONTNEED over each region (widened to whole pages) of the read-only file maps `maps` keeps open."""
    assert maps is not None and _MADVISE is not None
    for address, size in regions:
        start = address - address % _PAGE
        _MADVISE(start, address + size - start, mmap.MADV_DONTNEED)


_EMPTY_SLOTS = np.zeros(0, dtype=np.int32)
_EMPTY_TFS = np.zeros(0, dtype=np.float32)


@dataclass
class Parts:
    """What a segment is written from (`Slots.parts`): copies made under the context's lock."""

    seq: int
    n: int
    ids: list[str]
    lengths: Array
    tags: Array
    valid_from: Array
    valid_until: Array
    has_vec: Array
    pages: list[tuple[int, int, str]]
    tag_sets: list[tuple[str, ...]]
    total_length: float
    terms: list[str]  # the postings as triplets: term index, slot, frequency
    term_of: Array
    slot_of: Array
    tf_of: Array
    vectors: Callable[[int, int], Array] | None  # slots [start, end) as float32
    dim: int
    graph: Any = None
    graph_slots: Array | None = None
    graph_keys: Array | None = None
    graph_twins: Array | None = None


def folder(root: Path, context_id: str) -> Path:
    """A context's segments: named by a digest (ids carry no content)."""
    return root / hashlib.sha256(context_id.encode()).hexdigest()[:32]


def latest(root: Path, context_id: str, token: str) -> Segment | None:
    """The newest readable segment of the context made from the database `token` names, or None."""
    where = folder(root, context_id)
    with contextlib.suppress(OSError):
        for d in sorted((p for p in where.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True):
            with contextlib.suppress(Exception):  # a damaged or half-removed segment: the next, or SQLite
                return _open(d, token)
    return None


def _open(d: Path, token: str) -> Segment:
    meta = json.loads((d / "meta.json").read_text())
    if meta["format"] != FORMAT or meta["database"] != token:
        raise ValueError("another format, or another database's")
    a = {name: np.load(d / f"{name}.npy", mmap_mode="r") for name in _ARRAYS}
    vectors = np.load(d / "vectors.npy", mmap_mode="r") if (d / "vectors.npy").exists() else None
    maps = [getattr(m, "_mmap", None) for m in (vectors, a["post_slots"], a["post_tfs"])]
    a = {name: np.asarray(m) for name, m in a.items()}  # plain arrays over the same pages
    ids = json.loads((d / "ids.json").read_text())
    terms = json.loads((d / "terms.json").read_text())
    n = len(ids)
    if any(a[k].shape[0] != n for k in _ARRAYS[:6]) or a["offsets"].shape[0] != len(terms) + 1:
        raise ValueError("inconsistent")
    graph = graph_slots = graph_keys = graph_twins = None
    if (d / "graph_keys.npy").exists():  # a graph saved before its keys were (#54) is built again
        import faiss

        graph = faiss.read_index(str(d / "graph.faiss"))
        graph_slots, graph_keys, graph_twins = (np.load(d / f"graph_{part}.npy") for part in ("slots", "keys", "twins"))
    seg = Segment(
        seq=int(meta["seq"]),
        ids=ids,
        vocab={t: i for i, t in enumerate(terms)},
        pages=[(int(s), int(e), str(k)) for s, e, k in meta["pages"]],
        tag_sets=[tuple(t) for t in meta["tag_sets"]],
        total_length=float(meta["total_length"]),
        vectors=None if vectors is None else np.asarray(vectors),
        maps=[h for h in maps if h is not None and hasattr(h, "madvise")],
        start=0 if vectors is None else int(vectors.offset),
        graph=graph,
        graph_slots=graph_slots,
        graph_keys=graph_keys,
        graph_twins=graph_twins,
        **{k: a[k] for k in _ARRAYS},
    )
    if vectors is not None and hasattr(os, "preadv"):
        seg.file = (d / "vectors.npy").open("rb", buffering=0)
        weakref.finalize(seg, seg.file.close)
    return seg


def write_folder(root: Path, context_id: str, parts: Parts, rowids: Array, token: str) -> Path:
    """`parts` written to a hidden folder beside the context's segments: `publish` or `discard` it."""
    where = folder(root, context_id)
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / f".{parts.seq:020d}-{secrets.token_hex(6)}"
    tmp.mkdir()
    try:
        _write_files(tmp, parts, rowids, token)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def publish(tmp: Path) -> Path:
    """A written folder as the context's newest segment (one rename); its older ones removed, and one of the same
    change (saved again for its graph: its random suffix may sort either side)."""
    final = tmp.with_name(tmp.name[1:])
    os.rename(tmp, final)
    for old in final.parent.iterdir():
        if not old.name.startswith(".") and old.name[:20] <= final.name[:20] and old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def discard(tmp: Path) -> None:
    shutil.rmtree(tmp, ignore_errors=True)


def _write_files(d: Path, p: Parts, rowids: Array, token: str) -> None:
    order = np.lexsort((p.slot_of, p.term_of))
    term_of, slot_of, tf_of = p.term_of[order], p.slot_of[order], p.tf_of[order]
    counts = np.bincount(term_of, minlength=len(p.terms)) if term_of.shape[0] else np.zeros(len(p.terms), np.int64)
    kept = np.flatnonzero(counts > 0)  # terms no live document holds any more are dropped
    offsets = np.concatenate([[0], np.cumsum(counts[kept])]).astype(np.int64)
    arrays: dict[str, Array] = {
        "rowids": rowids.astype(np.int64),
        "lengths": p.lengths.astype(np.float32),
        "tags": p.tags.astype(np.int32),
        "valid_from": p.valid_from.astype(np.int64),
        "valid_until": p.valid_until.astype(np.int64),
        "has_vec": p.has_vec.astype(bool),
        "offsets": offsets,
        "post_slots": slot_of.astype(np.int32),
        "post_tfs": tf_of.astype(np.float32),
    }
    for name, arr in arrays.items():
        _save(d / f"{name}.npy", partial(np.save, arr=arr))
    if p.vectors is not None and p.dim:
        with (d / "vectors.npy").open("wb") as f:  # written, not mapped: a mapped file's pages count in the RSS
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False}
            np.lib.format.write_array_header_1_0(f, {**header, "shape": (p.n, p.dim)})
            for start in range(0, p.n, BLOCK):
                end = min(p.n, start + BLOCK)
                block = p.vectors(start, end)
                block[~p.has_vec[start:end]] = 0.0
                f.write(np.ascontiguousarray(block, dtype=np.float32).tobytes())
        _sync(d / "vectors.npy")
    if p.graph is not None and p.graph_slots is not None and p.graph_keys is not None and p.graph_twins is not None:
        import faiss

        faiss.write_index(p.graph, str(d / "graph.faiss"))
        _sync(d / "graph.faiss")
        for name, arr in (("slots", p.graph_slots), ("keys", p.graph_keys), ("twins", p.graph_twins)):
            _save(d / f"graph_{name}.npy", partial(np.save, arr=arr))
    _save(d / "ids.json", lambda f: f.write(json.dumps(p.ids).encode()))
    _save(d / "terms.json", lambda f: f.write(json.dumps([p.terms[i] for i in kept.tolist()]).encode()))
    meta = {
        "format": FORMAT,
        "database": token,
        "seq": p.seq,
        "pages": p.pages,
        "tag_sets": p.tag_sets,
        "total_length": p.total_length,
    }
    _save(d / "meta.json", lambda f: f.write(json.dumps(meta).encode()))


def _save(path: Path, put: Callable[[Any], Any]) -> None:
    with open(path, "wb") as f:
        put(f)
        f.flush()
        os.fsync(f.fileno())


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def claim(root: Path, token: str) -> None:
    """Segments another database left (its file replaced) are removed: they would never be opened again."""
    mark = root / "database"
    with contextlib.suppress(OSError):
        if mark.read_text() != token:
            shutil.rmtree(root, ignore_errors=True)
    if not mark.exists():
        root.mkdir(parents=True, exist_ok=True)
        mark.write_text(token)


def remove_all(root: Path) -> None:
    """Every context's segments (after an erasure)."""
    shutil.rmtree(root, ignore_errors=True)
