"""Issue #27, erasure on every surface: MCP (`erasure_request` / `erasure_status` / `erasure_verify`), REST, the
CLI (`engram erase`, `engram erasure verify RECEIPT` offline), the published key (`current_identity`,
`/.well-known/engram-receipt-key`); and the audit trail keeps the erasure's calls (ids, no content)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from engram.cli.devserver import cli
from engram.families.memory.base import Turn
from engram.kernel.caller import ANY
from engram.kernel.clock import SystemClock
from engram.settings import Settings
from engram.wiring import build_local
from tests.conftest import Live
from tests.fixtures.files import sqlite_files_holding
from tests.functional.mcpclient import connect


async def test_erasure_over_mcp_and_rest_with_a_receipt_that_verifies(live: Live) -> None:
    who = f"org/acme/user/erased-{uuid.uuid4().hex[:8]}"
    live.engram.identity.register_scopes("acme", [who])
    _, principal = live.engram.identity.create_key(["acme"], "agent", [who])
    caller = live.engram.identity.enter(principal, "acme", ANY, "t")
    secret = f"okapi-{uuid.uuid4().hex[:6]}"
    live.engram.memory.store(caller, Turn(f"My locker code is {secret}."), [[who]])
    live.engram.workctx.set(caller, "plan", {"note": secret}, None, None)
    async with connect(live.url, live.keys.management) as m:
        me = await m.call_tool("current_identity", {})
        assert me.structured_content is not None
        published = me.structured_content["receipt_public_key"]
        preview = await m.call_tool("erasure_request", {"scope": who, "preview": True})
        assert preview.structured_content is not None and preview.structured_content["preview"]
        assert preview.structured_content["found"]["memory"]["records"]["turn"] == 1
        asked = await m.call_tool("erasure_request", {"scope": who})
        assert asked.structured_content is not None and asked.structured_content["status"] == "pending"
        request_id = asked.structured_content["request_id"]
        live.engram.queue.join()
        state = await m.call_tool("erasure_status", {"request_id": request_id})
        assert state.structured_content is not None and state.structured_content["status"] == "done"
        receipt = state.structured_content["receipt"]
        assert receipt["public_key"] == published and receipt["subject"] == {"scope": who}
        checked = await m.call_tool("erasure_verify", {"request_id": request_id})
        assert checked.structured_content is not None
        assert checked.structured_content["clean"] and checked.structured_content["receipt_valid"]
        trail = await m.call_tool("audit_query", {"tool": "erasure_request", "limit": 5})
        assert trail.structured_content is not None and trail.structured_content["entries"]
    async with connect(live.url, live.keys.agent) as agent:  # an agent key may not erase
        refused = await agent.call_tool("erasure_request", {"scope": who, "preview": True})
        assert refused.is_error
    key = httpx.get(f"{live.url}/.well-known/engram-receipt-key").json()
    assert key == {"algorithm": "Ed25519", "public_key": published}
    rest = httpx.get(f"{live.url}/api/v1/acme/erasures/status", params={"request_id": request_id},
                     headers={"Authorization": f"Bearer {live.keys.management}"})  # fmt: skip
    assert rest.status_code == 200 and rest.json()["receipt"] == receipt
    holding = sqlite_files_holding(live.engram.settings.data_dir, "*.db*", secret.encode())[secret.encode()]
    assert holding == []  # no store keeps it, not even in freed pages or the log (the audit trail included)


def test_the_cli_erases_and_verifies_a_receipt_offline(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, embedder="none", queue_worker=False), SystemClock())
    engram.identity.register_scopes("acme", ["org/acme/user/alice"])
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme/user/alice"])
    alice = engram.identity.enter(principal, "acme", ANY, "t")
    engram.workctx.set(alice, "plan", {"step": 1}, None, None)
    preview = json.loads(cli("erase", "--context", "acme", "--scope", "org/acme/user/alice", "--preview",
                             data_dir=data))  # fmt: skip
    assert preview["found"] == {"context": {"records": {"ctxkey": 1}, "versions": {"ctxkey": 1}}}
    done = json.loads(cli("erase", "--context", "acme", "--scope", "org/acme/user/alice", "--wait", data_dir=data))
    assert done["status"] == "done" and done["erased"]["records"] == {"ctxkey": 1}
    saved = tmp_path / "receipt.json"
    saved.write_text(json.dumps(done))
    published = engram.erasure.public_key()
    assert cli("erasure", "verify", str(saved), f"--public-key={published}", data_dir=data).startswith("valid")
    forged = dict(done["receipt"], erased={"records": {"ctxkey": 0}})
    saved.write_text(json.dumps(forged))
    with pytest.raises(RuntimeError):
        cli("erasure", "verify", str(saved), data_dir=data)


def test_the_cli_export_gives_an_object_once_with_its_whole_history_across_pages(tmp_path: Path) -> None:
    """`engram export` joins a history that spans `subject_export`'s pages: one line for the object, every earlier
    version once, newest first, and the summary counts it once."""
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, embedder="none", queue_worker=False), SystemClock())
    engram.identity.register_scopes("acme", ["org/acme/user/alice"])
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme/user/alice"])
    alice = engram.identity.enter(principal, "acme", ANY, "t")
    big = "x" * 100_000
    for n in range(31):  # 3 MB of versions: more than a page holds
        engram.workctx.set(alice, "long", {"n": n, "pad": big}, None, None)
    engram.workctx.set(alice, "short", {"n": 0}, None, None)
    out = tmp_path / "export.jsonl"
    said = subprocess.run([sys.executable, "-m", "engram.cli", "export", "--context", "acme", "--scope",
                           "org/acme/user/alice", f"--out={out}"], env=dict(os.environ, ENGRAM_DATA_DIR=str(data)),
                          capture_output=True, text=True, check=True).stderr  # fmt: skip
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(o["id"].rsplit("|", 1)[1] for o in lines) == ["long", "short"]  # ids: the principal's, the key
    assert not any(o.get("continued") for o in lines)
    long = next(o for o in lines if o["id"].endswith("|long"))
    assert long["version"] == 31 and [v["version"] for v in long["earlier"]] == list(range(30, 0, -1))
    assert [v["data"]["value"]["n"] for v in long["earlier"]][:2] == [29, 28]
    assert "2 object(s)" in said


def test_an_export_that_fails_part_way_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`engram export --out F`: a failure after the first page (the store gone away) leaves neither F nor a part of
    it to be taken for the whole export; an export that finishes replaces F whole."""
    from engram.cli import main as engram_cli
    from engram.families.identity.subject_access import SubjectAccess
    from engram.kernel.errors import Unavailable

    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, embedder="none", queue_worker=False), SystemClock())
    engram.identity.register_scopes("acme", ["org/acme/user/alice"])
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme/user/alice"])
    alice = engram.identity.enter(principal, "acme", ANY, "t")
    for n in range(31):  # more than a page
        engram.workctx.set(alice, "long", {"n": n, "pad": "x" * 100_000}, None, None)
    out = tmp_path / "alice.jsonl"
    out.write_text("an older export\n")
    pages = SubjectAccess.export
    calls: list[int] = []

    def failing(self: SubjectAccess, *args: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 2:
            raise Unavailable("the store went away")
        return pages(self, *args)

    argv = ["export", "--data-dir", str(data), "--context", "acme", "--scope", "org/acme/user/alice", f"--out={out}"]
    monkeypatch.setattr(SubjectAccess, "export", failing)
    assert engram_cli.main(argv) == 2  # "error: the store went away"
    assert out.read_text() == "an older export\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "alice.jsonl", "data"]  # fmt: skip
    monkeypatch.setattr(SubjectAccess, "export", pages)
    assert engram_cli.main(argv) == 0
    [line] = out.read_text().splitlines()
    assert len(json.loads(line)["earlier"]) == 30 and sorted(p.name for p in tmp_path.iterdir()) == [
        "alice.jsonl", "data"]  # fmt: skip


def test_an_erasure_the_cli_runs_searches_for_traces_by_vector_too(tmp_path: Path) -> None:
    """`engram erase --wait` runs the erasure in the CLI's process: it had no embedder there, so its look for traces
    searched by keyword only (and an entity others keep lost its vector). It has the deployment's now."""
    data = tmp_path / "data"
    engram = build_local(Settings(data_dir=data, queue_worker=False), SystemClock())  # the model, as deployed
    engram.identity.register_scopes("acme", ["org/acme/user/alice"])
    _, principal = engram.identity.create_key(["acme"], "agent", ["org/acme/user/alice"])
    alice = engram.identity.enter(principal, "acme", ANY, "t")
    engram.memory.store(alice, Turn("My tortoise Xerxesqueen sleeps in the shed."), [["org/acme/user/alice"]])
    engram.queue.join()
    done = json.loads(cli("erase", "--context", "acme", "--scope", "org/acme/user/alice", "--wait", data_dir=data))
    assert done["status"] == "done" and done["erased"]["records"]["turn"] == 1
    traces = done["receipt"]["traces"]
    assert traces["words"] > 0 and traces["modes"] == ["bm25", "vector", "hybrid"] and traces["left"] == 0


async def written_everywhere(live: Live, name: str, word: str) -> tuple[str, str, str]:
    """A new subject, its distinctive word written through every family with its own key: (path, word, key)."""
    tag = uuid.uuid4().hex[:6]
    who, secret = f"org/acme/user/{name}-{tag}", f"{word}{tag}"
    live.engram.identity.register_scopes("acme", [who])
    own, _ = live.engram.identity.create_key(["acme"], "agent", [who])
    live.engram.schemas.create("acme", "cli", f"{name}{tag}", "record", {"type": "object"}, [], "keyword", None, "")
    writes = [
        ("memory_store", {"content": f"My cat is called {secret} Smith.", "scopes": [[who]]}),
        ("context_set", {"key": f"{name}/{tag}", "value": {"note": secret}}),
        ("conversation_append", {"thread_id": f"t-{tag}", "role": "user", "content": f"Ask {secret} Smith."}),
        ("document_ingest", {"text": f"{secret} Smith works at Initech.", "title": f"{secret} memo"}),
        ("record_create", {"type": f"{name}{tag}", "payload": {"text": f"{secret} ledger"}}),
        ("write_code", {"path": f"{name}_{tag}.py", "content": f"{secret.upper()} = 1\n", "reason": name}),
    ]
    async with connect(live.url, own) as c:
        for tool, args in writes:
            r = await c.call_tool(tool, args)
            assert not r.is_error, (tool, r)
    live.engram.queue.join()
    return who, secret, own


async def test_after_an_erasure_no_read_or_search_tool_returns_the_subjects_content(live: Live) -> None:
    """The probe: the subject's distinctive word written through every family; the read and search tools find it
    (every mode); erased; then none of them returns it, to the subject's own key or to a key that sees the org."""
    who, secret, own = await written_everywhere(live, "probe", "zarquon")
    tag = secret.removeprefix("zarquon")
    wide, _ = live.engram.identity.create_key(["acme"], "agent", ["org/acme"])
    modes = ("hybrid", "bm25", "vector")
    probes: list[tuple[str, dict[str, Any]]] = [
        *[("memory_recall", {"query": f"{secret} cat", "mode": m}) for m in modes],
        *[("knowledge_search", {"query": f"{secret} Initech", "mode": m}) for m in modes],
        ("hybrid_search", {"query": f"{secret} Initech"}),
        ("memory_profile", {}),
        ("recall", {"query": secret}),
        ("conversation_search", {"query": f"{secret} Smith"}),
        ("conversation_history", {"thread_id": f"t-{tag}"}),
        ("context_get", {"key": f"probe/{tag}"}),
        ("entity_search", {"query": f"{secret} Smith"}),
        ("entity_list", {"type": "Person", "sort": "mention_count"}),
        ("document_query", {"op": "prefix", "field": "title", "value": secret}),
        ("semantic_search", {"query": f"{secret} constant", "similarity_threshold": 0.0}),
    ]

    async def answering(key: str) -> set[str]:
        """The probes whose answer holds the subject's word (besides what it echoes of the question)."""
        found = set()
        async with connect(live.url, key) as c:
            for tool, args in probes:
                r = await c.call_tool(tool, args)
                answer = r.structured_content or {"text": [getattr(x, "text", "") for x in r.content]}
                shown = json.dumps({k: v for k, v in answer.items() if k not in args})  # not the echoed question
                if secret in shown.lower():
                    found.add(f"{tool} {args.get('mode', '')}".strip())
        return found

    before = await answering(own)
    assert before >= {
        "memory_recall hybrid",
        "memory_recall bm25",
        "knowledge_search hybrid",
        "knowledge_search bm25",
        "conversation_search",
        "conversation_history",
        "hybrid_search",
        "entity_search",
        "document_query",
    }, before
    async with connect(live.url, live.keys.management) as m:
        assert not (await m.call_tool("erasure_request", {"scope": who})).is_error
    live.engram.queue.join()
    assert await answering(own) == set()
    assert await answering(wide) == set()


async def test_an_export_over_mcp_rest_and_the_cli_holds_what_every_family_keeps_of_the_subject(live: Live) -> None:
    """Subject access, erasure's counterpart: the subject's distinctive word written through every family comes back
    in `subject_export`'s pages (MCP, REST, `engram export`), each object once; an agent key may not export."""
    who, secret, own = await written_everywhere(live, "export", "quuxolot")
    async with connect(live.url, own) as c:
        refused = await c.call_tool("subject_export", {"scope": who})
        assert refused.is_error
    objects: list[dict[str, Any]] = []
    async with connect(live.url, live.keys.management) as m:
        cursor = None
        while True:
            page = await m.call_tool(
                "subject_export", {"scope": who, "limit": 2, **({"cursor": cursor} if cursor else {})}
            )
            assert not page.is_error and page.structured_content is not None
            assert len(page.structured_content["objects"]) <= 2
            objects += page.structured_content["objects"]
            cursor = page.structured_content["cursor"]
            if cursor is None:
                break
    kinds = {o["kind"] for o in objects}
    assert kinds >= {"turn", "ctxkey", "thread", "message", "document", "record", "wfile"}
    for kind in ("turn", "ctxkey", "message", "document", "record"):  # a file's text is its blob's
        assert any(secret in json.dumps(o["data"]) for o in objects if o["kind"] == kind), kind
    names = sorted(f"{o['kind']}:{o['id']}" for o in objects)
    assert len(set(names)) == len(names)
    rest = httpx.post(f"{live.url}/api/v1/acme/exports", json={"scope": who, "limit": 500},
                      headers={"Authorization": f"Bearer {live.keys.management}"})  # fmt: skip
    assert rest.status_code == 200 and rest.json()["cursor"] is None
    assert sorted(f"{o['kind']}:{o['id']}" for o in rest.json()["objects"]) == names
    lines = cli("export", "--context", "acme", "--scope", who, data_dir=live.engram.settings.data_dir).splitlines()
    assert sorted(f"{o['kind']}:{o['id']}" for o in map(json.loads, lines)) == names
