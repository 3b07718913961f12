"""One data folder, many processes (DESIGN §9): `engram serve`, the CLI and another server share it.

- kill -9 in the middle of an ingest: after a restart every acknowledged document reaches `indexed`
  (its job was committed with it; the dead process's leases are taken over).
- A running server sees what another process wrote on its next request: documents (BM25 and vectors),
  memories (its recall cache included) and counts.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.cli.devserver import cli, serve, start, stop
from tests.e2e.served import CTX, api, keyed_folder

pytestmark = pytest.mark.e2e


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, str]:
    return keyed_folder(tmp_path)


def doc_text(n: int) -> str:
    return f"Report {n}: the pump station number {n} in district {n % 7} needs its valves checked. " * 4


def killed_mid_writes(
    folder: Path, key: str, path: str, body_of: Callable[[int, int], dict[str, Any]], at_least: int = 40
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Four REST clients POST `body_of(writer, n)` to `path` on a server that is killed with -9 once at least
    `at_least` writes were acknowledged: the (body, answer) pairs acknowledged before the kill."""
    proc, url = start(folder)
    acknowledged: list[tuple[dict[str, Any], dict[str, Any]]] = []
    lock, stop_sending = threading.Lock(), threading.Event()

    def send(writer: int) -> None:
        with api(url, key) as c:
            for n in range(100):
                if stop_sending.is_set():
                    return
                body = body_of(writer, n)
                try:
                    r = c.post(path, json=body)
                except httpx.TransportError:
                    return  # the server died mid-request: not acknowledged
                if r.status_code == 200:
                    with lock:
                        acknowledged.append((body, r.json()))

    senders = [threading.Thread(target=send, args=(w,)) for w in range(4)]
    for t in senders:
        t.start()
    deadline = time.monotonic() + 120
    while len(acknowledged) < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop_sending.set()
    for t in senders:
        t.join(30)
    assert len(acknowledged) >= at_least
    return acknowledged


def test_kill_9_mid_ingest_then_every_acknowledged_document_is_indexed(data: tuple[Path, str]) -> None:
    folder, key = data
    proc, url = start(folder)
    acknowledged: list[str] = []
    stop_sending = threading.Event()

    def upload() -> None:
        with api(url, key) as c:
            for n in range(200):
                if stop_sending.is_set():
                    return
                body = {"bytes_base64": base64.b64encode(doc_text(n).encode()).decode(), "title": f"Report {n}"}
                try:
                    r = c.post("/documents", json=body)
                except httpx.TransportError:
                    return  # the server died mid-request: not acknowledged
                if r.status_code == 200:
                    acknowledged.append(r.json()["id"])

    sender = threading.Thread(target=upload)
    sender.start()
    deadline = time.monotonic() + 120
    while len(acknowledged) < 40 and time.monotonic() < deadline and sender.is_alive():
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stop_sending.set()
    sender.join(30)
    assert len(acknowledged) >= 40
    killed_at = time.monotonic()
    from engram.adapters.local.sqlite_records import SqliteRecordStore
    from engram.kernel.queue import StoreQueue

    left = StoreQueue(SqliteRecordStore(folder / "records.db"), worker=False).pending()
    print(f"acknowledged {len(acknowledged)}, jobs left by the killed process: {len(left)}")
    assert left, "the kill came after all the work was done: nothing was recovered"
    proc, url = start(folder)  # a new process on the same folder finishes what the dead one left
    try:
        with api(url, key) as c:
            pending = set(acknowledged)
            while pending and time.monotonic() - killed_at < 120:
                for doc_id in sorted(pending):
                    r = c.get(f"/documents/{doc_id}")
                    assert r.status_code == 200, r.text
                    if r.json()["status"] == "indexed":
                        pending.discard(doc_id)
                    assert r.json()["status"] != "failed", r.json()
                time.sleep(0.5)
            assert pending == set(), f"{len(pending)} of {len(acknowledged)} never indexed"
            # and each is found by a vector search, not only BM25
            last = len(acknowledged) - 1
            r = c.post("/query", json={"query": "valves of a pump station", "mode": "vector", "k": 100})
            assert r.status_code == 200
            found = {x["document"]["id"] for x in r.json()["results"]}
            assert set(acknowledged[last - 5 :]) <= found or len(found) == 100
    finally:
        stop(proc)


def test_a_server_sees_what_another_process_wrote(data: tuple[Path, str]) -> None:
    folder, key = data
    (folder / "in").mkdir()
    (folder / "in" / "heron.md").write_text("# Herons\nThe grey heron nests in tall reed beds near Lake Vico.")
    with serve(folder) as url, api(url, key) as c:
        before = c.post("/query", json={"query": "where does the grey heron nest", "k": 3}).json()["results"]
        assert before == []
        recall = c.post("/context", json={"query": "what does the user drive"})  # cached by the server now
        assert "Volvo" not in recall.json()["context"]
        # another process: the CLI ingests into the same folder and exits
        env_key = {"ENGRAM_API_KEY": key}
        os.environ.update(env_key)
        try:
            out = cli("ingest", str(folder / "in" / "heron.md"), data_dir=folder)
        finally:
            os.environ.pop("ENGRAM_API_KEY")
        assert "ingested: 1" in out
        found = c.post("/query", json={"query": "where does the grey heron nest", "k": 3}).json()["results"]
        assert found and "reed beds" in found[0]["chunk"]["text"]
        vector = c.post("/query", json={"query": "bird breeding place", "mode": "vector", "k": 3}).json()
        assert vector["results"] and vector["results"][0]["title"] == "heron"
        # a memory stored by another process is recalled at once, past the server's recall cache
        from engram.families.memory.service import Turn
        from engram.settings import Settings
        from engram.wiring import build_local

        other = build_local(Settings(data_dir=folder, queue_worker=False))
        principal = other.identity.authenticate(key)
        caller = other.identity.enter(principal, CTX, frozenset({"agent"}), "memory_store")
        other.memory.store(caller, Turn("I drive a Volvo estate."), None)
        recall = c.post("/context", json={"query": "what does the user drive"})
        assert "Volvo" in recall.json()["context"]
        # and the other way: what the server writes, the other process reads
        assert c.post("/facts", json={"content": "I live in Lisbon."}).status_code == 200
        assert "Lisbon" in other.memory.recall(caller, "where does the user live")["context"]


def test_kill_9_mid_memory_writes_then_every_acknowledged_memory_is_recalled(data: tuple[Path, str]) -> None:
    """Four writers store memories, the server killed with -9 in the middle (a write may die between its
    commit and its indexing): after a restart every acknowledged turn is recalled by its own words — by the
    writer's indexing, or by the safety-net job committed with it (due 30 s later, run by the new process) —
    and stored once."""
    folder, key = data
    said = "Writer {w} replaced valve v{w}x{n} at the pump station."
    body = lambda w, n: {"content": said.format(w=w, n=n)}  # noqa: E731
    acknowledged = {a["turn_id"]: b["content"].split()[4] for b, a in killed_mid_writes(folder, key, "/facts", body)}
    proc, url = start(folder)
    try:
        with api(url, key) as c:
            assert c.post("/facts", json={"content": "Back online after the restart."}).status_code == 200
            missing = dict(acknowledged)
            deadline = time.monotonic() + 120
            while missing and time.monotonic() < deadline:
                for tid, token in list(missing.items()):
                    r = c.post("/context", json={"query": f"valve {token}", "k": 5, "mode": "bm25"})
                    assert r.status_code == 200, r.text
                    if tid in {h["id"] for h in r.json()["results"]}:
                        del missing[tid]
                time.sleep(0.5)
            assert not missing, f"{len(missing)} acknowledged memories never reached the index"
        from engram.adapters.local.sqlite_records import SqliteRecordStore

        turns = SqliteRecordStore(folder / "records.db").query(CTX, "turn", limit=1000).items
        contents = [t.data["content"] for t in turns]
        assert len(contents) == len(set(contents))  # no write applied twice
        assert set(acknowledged) <= {t.id for t in turns}
    finally:
        stop(proc)


def test_kill_9_mid_conversation_then_every_acknowledged_message_is_there_and_found(data: tuple[Path, str]) -> None:
    """Appends to one thread from four writers, the server killed with -9 in the middle: after a restart
    every acknowledged message is in the thread's history, numbered without gaps or repeats, and found by
    a search; the thread takes new messages."""
    folder, key = data
    said = "Writer {w} reports valve {n} leaking. Jane Smith works at Acme Corporation."
    body = lambda w, n: {"thread_id": "ops", "role": "user", "content": said.format(w=w, n=n)}  # noqa: E731
    acknowledged = [a["message_id"] for _, a in killed_mid_writes(folder, key, "/threads/messages", body)]
    proc, url = start(folder)
    try:
        with api(url, key) as c:
            c.post("/threads/messages", json={"thread_id": "ops", "role": "assistant", "content": "Back online."})
            r = c.get("/threads/messages", params={"thread_id": "ops", "limit": 1000})
            assert r.status_code == 200, r.text
            ids = [m["id"] for m in r.json()["messages"]]
            assert set(acknowledged) <= set(ids) and len(ids) == len(set(ids)) and ids[-1] != acknowledged[-1]
            from engram.adapters.local.sqlite_records import SqliteRecordStore

            numbers = sorted(
                i.data["n"] for i in SqliteRecordStore(folder / "records.db").query(CTX, "message", limit=1000).items
            )
            assert numbers == list(range(1, len(numbers) + 1))  # no gap, no repeat
            found = c.post("/threads/search", json={"query": "valve leaking", "thread_id": "ops", "limit": 100})
            assert found.status_code == 200, found.text
            hits = {x["message_id"] for x in found.json()["results"]}
            assert len(hits & set(acknowledged)) >= min(99, len(acknowledged))
            # issue #23: each message's names reach the graph by a job committed with it, the killed
            # process's jobs included: Acme is mentioned once by every writer's message in the thread
            writers = len(numbers) - 1  # less "Back online."
            deadline, count = time.monotonic() + 120, -1
            while time.monotonic() < deadline:
                got = c.get("/entities/lookup", params={"name": "Acme Corporation"})
                count = got.json()["entity"]["mention_count"] if got.status_code == 200 else -1
                if count == writers:
                    break
                time.sleep(0.5)
            assert count == writers >= len(acknowledged)
            rels = c.get("/entities/relationships", params={"entity_id": "Person:jane smith"}).json()
            assert [r["type"] for r in rels["relationships"]] == ["works_at"]
    finally:
        stop(proc)


def test_kill_9_mid_record_writes_then_every_acknowledged_record_is_read_looked_up_and_found(
    data: tuple[Path, str],
) -> None:
    """Four writers create typed records (schema registered with the CLI), the server killed with -9 in the
    middle: after a restart every acknowledged record is read by id, found by an exact lookup on its field,
    and found by search (its index job was committed with it)."""
    folder, key = data
    spec = {
        "type": "asset",
        "jsonSchema": {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]},
        "lookupFields": [{"field": "tag", "ops": ["exact", "prefix"]}],
        "indexMode": "keyword",
    }
    (folder / "asset.json").write_text(json.dumps(spec))
    assert "registered record schema asset" in cli("schemas", "create", "--context", CTX, str(folder / "asset.json"),
                                                   data_dir=folder)  # fmt: skip
    body = lambda w, n: {"type": "asset", "payload": {"tag": f"pump{w}x{n}"}, "externalId": f"pump{w}x{n}"}  # noqa: E731
    acknowledged = {a["id"]: b["payload"]["tag"] for b, a in killed_mid_writes(folder, key, "/records", body)}
    proc, url = start(folder)
    try:
        with api(url, key) as c:
            for rid, tag in acknowledged.items():
                got = c.get(f"/records/{rid}")
                assert got.status_code == 200 and got.json()["payload"] == {"tag": tag}, got.text
                found = c.post("/records/lookup", json={"type": "asset", "field": "tag", "value": tag})
                assert [r["id"] for r in found.json()["items"]] == [rid], found.text
            deadline = time.monotonic() + 60
            missing = set(acknowledged)
            while missing and time.monotonic() < deadline:  # the restarted worker finishes any index job left
                for rid in list(missing):
                    hits = c.post("/search", json={"query": acknowledged[rid], "limit": 5}).json()["results"]
                    if rid in {h.get("record_id") for h in hits}:
                        missing.discard(rid)
                time.sleep(0.2)
            assert not missing, f"{len(missing)} acknowledged records never reached the index"
    finally:
        stop(proc)


def test_kill_9_mid_code_writes_then_every_acknowledged_file_is_read_graphed_and_found(
    data: tuple[Path, str],
) -> None:
    """Four agents write files through `write_code` (REST), each importing a shared module; the server is
    killed with -9 in the middle: after a restart every acknowledged version is read back, the shared
    module's dependents include every acknowledged file, and each is found by search."""
    folder, key = data
    proc, url = start(folder)
    with api(url, key) as c:
        made = c.post("/code/write", json={"path": "lib/shared.py", "content": "K = 1\n", "reason": "base"})
        assert made.status_code == 200, made.text
    stop(proc)
    body = lambda w, n: {"path": f"w{w}/m{n}.py", "content": f"from lib import shared\n\ndef valve_{w}_{n}():\n"  # noqa: E731
                         f"    return shared.K\n", "reason": f"writer {w}", "agent_id": f"agent-{w}"}  # fmt: skip
    acknowledged = {b["path"]: a["version"] for b, a in killed_mid_writes(folder, key, "/code/write", body)}
    proc, url = start(folder)
    try:
        with api(url, key) as c:
            for path in acknowledged:
                read = c.post("/code/read", json={"path": path, "include_semantic_context": False})
                assert read.status_code == 200 and read.json()["exists"], read.text
                assert f"def valve_{path[1]}_" in read.json()["content"]
            deps = c.post("/code/dependencies", json={"file_path": "lib/shared.py", "direction": "reverse"}).json()
            assert set(acknowledged) <= {d["path"] for d in deps["dependents"]}
            deadline = time.monotonic() + 60
            missing = set(acknowledged)
            while missing and time.monotonic() < deadline:  # the restarted worker finishes any index job left
                for path in list(missing):
                    name = path.replace("w", "valve_", 1).replace("/m", "_").removesuffix(".py")
                    body = {"query": name, "max_results": 5, "include_semantic": False}
                    hits = c.post("/search", json=body).json()["results"]
                    if path in {h["path"] for h in hits}:
                        missing.discard(path)
                time.sleep(0.2)
            assert not missing, f"{len(missing)} acknowledged files never reached the index"
    finally:
        stop(proc)


def test_kill_9_mid_erasure_then_a_restarted_server_finishes_it(
    data: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #27: an erasure is a queued job; a server killed while it runs leaves it to the next process on
    the folder, which erases the rest and signs the receipt. Nothing of the subject survives."""
    from engram.adapters.local.sqlite_records import SqliteRecordStore

    folder, key = data
    monkeypatch.setenv("ENGRAM_EMBEDDER", "none")  # the records are what matters here, not their vectors
    alice = "org/acme/user/alice"
    cli("scopes", "create", "--context", CTX, alice, data_dir=folder)
    out = cli("keys", "create", "--context", CTX, "--principal", "management", "--grant", "org/acme", data_dir=folder)
    admin = out.strip().splitlines()[-1]
    with serve(folder) as url, api(url, key) as c:
        for n in range(0, 3000, 100):
            turns = [{"content": f"Note {n + i}: the okapi eats {n + i} leaves.", "session_id": f"s{n}"}
                     for i in range(100)]  # fmt: skip
            assert c.post("/facts/batch", json={"turns": turns, "scopes": [[alice]]}).status_code == 200
    records = SqliteRecordStore(folder / "records.db")

    def left() -> int:  # the subject's turns (the only ones written): a count, cheap enough to poll
        return records.count(CTX, "turn")

    assert left() == 3000
    proc, url = start(folder)
    with api(url, admin) as m:
        asked = m.post("/erasures", json={"scope": alice})
        assert asked.status_code == 200, asked.text
        request_id = asked.json()["request_id"]
        deadline = time.monotonic() + 60
        while left() == 3000 and time.monotonic() < deadline:
            time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)  # mid-erasure: some turns gone, not all
    proc.wait()
    state = records.get(CTX, "erasure", request_id)
    assert state is not None and state.data["status"] != "done" and 0 < left() < 3000, (state, left())
    with serve(folder) as url, api(url, admin) as m:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = m.get("/erasures/status", params={"request_id": request_id}).json()
            if done["status"] == "done":
                break
            time.sleep(0.2)
        assert done["status"] == "done", done
        # the receipt counts what both processes erased: the killed one saved each batch of 500 as it finished, so
        # at most the batch it was killed after is missing from it (before, the whole family's first run was)
        assert 2500 <= done["erased"]["records"]["turn"] <= 3000, done["erased"]
        checked = m.get("/erasures/verify", params={"request_id": request_id}).json()
        assert checked["clean"] and checked["receipt_valid"], checked
    assert left() == 0
