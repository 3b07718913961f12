"""#54: the curve for documents — `knowledge_search` over HTTP at 10k, 100k (and 1M with `SCALE_MAX=1000000`) chunks
in one context: p50 / p99 at k 10, the first search after a restart, the server's peak RSS, bytes on disk, and ingest
throughput (`knowledge_bulk_ingest`, chunks indexed with their vectors a second) while the context grows
(`make bench BENCH=scale-chunks`; `bench.scale` is the same curve for memories).

The documents are made of the scale bench's real texts (`bench.scale.corpus`: LoCoMo turns and cranfield's and CISI's
sentences, then pairs of them): each text a paragraph, `PARAGRAPHS` paragraphs a document, ingested as a client
sends them — `knowledge_bulk_ingest`, 100 documents a call, in process, with a client's chunking defaults (paragraphs
packed to 256 tokens, 32 of overlap). What the bench makes up is a chunk's vector: the normalised sum of its
paragraphs' cached vectors (embedding a million chunks takes hours here); which paragraphs a chunk holds comes from
the product's own chunker (`chunking.chunk` of the parsed text), run on each document before it is sent. The
embedding jobs go through the product's queue and answer from those vectors. The server measured is a fresh
`engram serve` over the folder with the real model: cranfield's and CISI's questions, embedded for real, each
made fresh (a number appended), k 10.

`python -m bench.scale_chunks [max]`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.scale import DATA, SAMPLES, Corpus, corpus, curve, filler, measure, settle
from engram.families import find
from engram.families.knowledge.chunking import chunk
from engram.families.knowledge.parsing import parse

PARAGRAPHS = 40  # a document's paragraphs (~6 chunks of 256 tokens)
DOCUMENTS = 100  # a `knowledge_bulk_ingest` call's
JOIN = 20  # calls between two waits for the queue's embedding jobs (it is polled: waiting after each call halved the
# rate)
CONTEXT = "docs"
Vectors = np.ndarray[Any, Any]


def questions() -> list[str]:
    """cranfield's and CISI's questions, in turn."""
    out: list[str] = []
    for name in ("cranfield", "cisi"):
        lines = (DATA / name / "queries.jsonl").read_text().splitlines()
        out += [json.loads(line)["text"] for line in lines if line.strip()]
    return out[::2] + out[1::2]


def chunk_vectors(paragraphs: list[str], vectors: list[Vectors], chunks: list[str]) -> list[Vectors]:
    """Each chunk's vector: the normalised sum of the vectors of the paragraphs it joins (a chunk is consecutive
    paragraphs, each with its spaces collapsed, joined by a space; the first may be the one before's last, carried
    over). A paragraph the chunker cut (one over the limit) gives its vector to each of its parts."""
    flat = [" ".join(p.split()) for p in paragraphs]
    out: list[Vectors] = []
    at = 0
    for text in chunks:
        span = None
        for s in range(at, len(flat)):
            if not text.startswith(flat[s]):
                if flat[s] and text in flat[s]:  # a part of a cut paragraph
                    span = (s, s)
                    break
                continue
            joined, e = flat[s], s
            while joined != text and e + 1 < len(flat) and text.startswith(f"{joined} {flat[e + 1]}"):
                e += 1
                joined = f"{joined} {flat[e]}"
            if joined == text:
                span = (s, e)
                break
        if span is None:
            raise ValueError(f"chunk not made of the document's paragraphs: {text[:80]!r}")
        v = np.sum(vectors[span[0] : span[1] + 1], axis=0)
        out.append((v / np.linalg.norm(v)).astype(np.float32))
        at = span[0]
    return out


def fill(data: Path, c: Corpus, have: int, end: int, next_item: int, key: str | None) -> tuple[str, float, int, int]:
    """Documents into `CONTEXT` until it holds `end` chunks (from `have`, its paragraphs from the corpus's item
    `next_item` on): (the key, chunks indexed a second, the chunks it holds, the next item)."""
    cached, engram, key, caller = filler(data, key, CONTEXT)
    bulk, search = find("knowledge_bulk_ingest"), find("knowledge_search")
    assert bulk and search
    services = engram.family_services(bulk.family)
    # the writer serves reads (as a server taking these writes would): the context is loaded, its graph built and
    # grown with the writes, and it is saved as a segment as it grows and when this ends
    reading = engram.family_services(search.family)
    asked = questions()
    t0, start, n = time.perf_counter(), have, 0
    while have < end:
        docs = []
        for _ in range(DOCUMENTS):
            items = [c.item(next_item + i) for i in range(PARAGRAPHS)]
            next_item += PARAGRAPHS
            paragraphs = [" ".join(t.split()) for t, _ in items]  # one paragraph each (a turn may hold a blank line)
            text = "\n\n".join(paragraphs)
            chunks = [x.text for x in chunk(parse(text.encode(), "text/plain", "bench"), "paragraph", 256, 32)]
            for t, v in zip(chunks, chunk_vectors(paragraphs, [v for _, v in items], chunks), strict=True):
                cached.known[t] = v
            docs.append({"title": f"Document {next_item // PARAGRAPHS}", "content": text})
            have += len(chunks)
            if have >= end:
                break
        out = bulk.run(services, caller, bulk.input.model_validate({"collection": "bench", "documents": docs}),
                       lambda *_: None)  # fmt: skip
        assert isinstance(out, dict) and not out["errors"], out
        n += 1
        if n % JOIN == 0:  # the embedding jobs done, their vectors forgotten
            engram.queue.join()
            cached.known.clear()
        if n % JOIN == 1:  # a read now and then, as a server's clients would send
            args = search.input.model_validate({"query": asked[n % len(asked)], "k": 10})
            search.run(reading, caller, args, lambda *_: None)
            pace = (have - start) / (time.perf_counter() - t0)
            print(f"    {have} chunks, {pace:.0f}/s", file=sys.stderr, flush=True)
    engram.queue.join()
    rate = (have - start) / (time.perf_counter() - t0)
    settle(engram)
    engram.queue.stop()  # (`bench.scale.fill`)
    del engram
    return key, rate, have, next_item


def run(largest: int | None = None, samples: int = SAMPLES) -> dict[str, Any]:
    c = corpus()
    asked = questions()
    held: dict[str, Any] = {"key": None, "have": 0, "next": 0}

    def step(data: Path, size: int) -> tuple[str, dict[str, Any]]:
        key, rate, have, nxt = fill(data, c, held["have"], size, held["next"], held["key"])
        held.update(key=key, have=have, next=nxt)
        row = {"chunks": have, "ingest_chunks_per_s": round(rate, 1)}
        return key, row | measure(data, key, asked, samples, have, "knowledge_search", CONTEXT)

    return curve("engram-scale-chunks-", largest, {"texts": len(c.texts), "paragraphs_a_document": PARAGRAPHS}, step)


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else None), indent=2))
