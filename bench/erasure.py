"""Issue #27: erasing a subject with 10,000 memories and 100 documents, locally (`make bench BENCH=erasure`).

One data folder, embedded as a user's: Alice's 10,000 LoCoMo turns and 100 cranfield abstracts (with their
entities, the graph's jobs run), Bob's 1,000 turns beside them. Timed: the preview, then the erasure job from
its request to its signed receipt, then the look afterwards (`erasure_verify`). Target: under a minute. Before them,
the subject's export (`subject_export`, every page of 500), as a user would take it before erasing (reported)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cranfield import load as cranfield
from bench.locomo import turns_and_questions
from engram.families import find
from engram.families.knowledge.base import NewDocument
from engram.kernel.caller import ANY
from engram.settings import Settings
from engram.trust.erasure import Subject
from engram.wiring import build_local

ALICE, BOB = "org/bench/user/alice", "org/bench/user/bob"


def run(memories: int = 10_000, documents: int = 100) -> dict[str, Any]:
    turns, _ = turns_and_questions()
    corpus, _, _ = cranfield()
    with tempfile.TemporaryDirectory() as tmp:
        engram = build_local(Settings(data_dir=Path(tmp), queue_worker=False))
        engram.identity.register_scopes("bench", [ALICE, BOB])
        keys = {who: engram.identity.create_key(["bench"], "agent", [who])[1] for who in (ALICE, BOB)}
        _, admin_key = engram.identity.create_key(["bench"], "management", ["org/bench"])
        admin = engram.identity.enter(admin_key, "bench", ANY, "bench")
        store = find("memory_store_batch")
        assert store
        t0 = time.perf_counter()
        for who, n in ((ALICE, memories), (BOB, memories // 10)):
            caller = engram.identity.enter(keys[who], "bench", ANY, "bench")
            for i in range(0, n, 100):
                batch = [{"content": turns[(i + j) % len(turns)], "session_id": f"s{(i + j) // 20}"}
                         for j in range(100)]  # fmt: skip
                store.run(
                    engram.family_services(store.family),
                    caller,
                    store.input.model_validate({"turns": batch}),
                    lambda *_: None,
                )
        alice = engram.identity.enter(keys[ALICE], "bench", ANY, "bench")
        for doc in corpus[:documents]:
            engram.documents.ingest(alice, NewDocument(f"{doc['title']}\n\n{doc['text']}".encode(), doc["title"]))
        engram.queue.join()
        loaded = time.perf_counter() - t0
        print(f"  loaded in {loaded:.0f} s", file=sys.stderr)
        subject = Subject(ALICE)
        t, exported, cursor = time.perf_counter(), 0, None
        while True:  # subject access first, as a user would before erasing: every page of 500
            page = engram.subject_access.export(admin, subject, cursor, 500)
            exported, cursor = exported + len(page["objects"]), page["cursor"]
            if cursor is None:
                break
        export_s = time.perf_counter() - t
        t = time.perf_counter()
        preview = engram.erasure.request(admin, subject, preview=True)
        preview_s = time.perf_counter() - t
        t = time.perf_counter()
        asked = engram.erasure.request(admin, subject, preview=False)
        engram.queue.join()
        erase_s = time.perf_counter() - t
        done = engram.erasure.status(admin, asked["request_id"])
        t = time.perf_counter()
        check = engram.erasure.verify(admin, asked["request_id"])
        verify_s = time.perf_counter() - t
        assert done["status"] == "done" and check["clean"] and check["receipt_valid"], (done["status"], check)
        out = {
            "memories": memories,
            "documents": documents,
            "load_s": round(loaded, 1),
            "export_s": round(export_s, 2),
            "exported_objects": exported,
            "preview_s": round(preview_s, 2),
            "erasure_s": round(erase_s, 2),
            "verify_s": round(verify_s, 2),
            "erased": done["erased"],
            "found_before": preview["found"],
            "target_s": 60,
        }
        print(
            f"  export {export_s:.2f} s ({exported} objects), preview {preview_s:.2f} s, "
            f"erasure {erase_s:.2f} s, verify {verify_s:.2f} s",
            file=sys.stderr,
        )
        return out
