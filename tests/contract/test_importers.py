"""#53: the importers from the systems people leave, each from a file built in that system's documented export
format: what they map lands where a client finds it (memories, threads, documents, under the scope given), what
they cannot map is counted as skipped with the reason, a file of the wrong shape is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram.cli.main import main
from engram.kernel.caller import ANY, Caller, Principal
from engram.kernel.errors import InvalidInput
from engram.kernel.ports import scan
from engram.settings import Settings
from engram.transfer.importers import run
from engram.wiring import Engram, build_local

ALICE = "org/acme/user/alice"


@pytest.fixture
def e(tmp_path: Path) -> Engram:
    engram = build_local(Settings(data_dir=tmp_path / "data", embedder="none", queue_worker=False))
    engram.identity.register_scopes("acme", [ALICE, "org/acme/user/bob"])
    return engram


def operator(grant: str = "org/acme") -> Caller:
    return Caller(Principal("cli", "management", ("acme",), (grant,)), "acme", "cli")


def turns(e: Engram) -> dict[str, dict[str, Any]]:
    return {i.data["content"]: i.data for i in scan(e.records, "acme", "turn")}


def agent(e: Engram, grant: str) -> Caller:
    _, principal = e.identity.create_key(["acme"], "agent", [grant])
    return e.identity.enter(principal, "acme", ANY, "t")


def test_the_mcp_reference_memory_servers_memory_json(e: Engram, tmp_path: Path) -> None:
    lines = [
        {"type": "entity", "name": "John_Smith", "entityType": "person",
         "observations": ["Speaks fluent Spanish", "Graduated in 2019"]},
        {"type": "entity", "name": "Anthropic", "entityType": "organization", "observations": []},
        {"type": "relation", "from": "John_Smith", "to": "Anthropic", "relationType": "works_at"},
        {"type": "note", "text": "not a graph line"},
    ]  # fmt: skip
    path = tmp_path / "memory.json"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    report = run("mcp-memory", path, e, operator(), ALICE)
    assert report["mapped"] == {"entities": 2, "memories": 4, "relations": 1}
    assert report["skipped"] == {"a line that is neither an entity nor a relation": 1, "line 5: not JSON": 1}
    got = turns(e)
    assert {
        "John_Smith: Speaks fluent Spanish",
        "Anthropic is a organization.",
        "John_Smith works at Anthropic.",
    } <= set(got)
    assert got["John_Smith: Graduated in 2019"]["metadata"]["entityType"] == "person"
    assert all(t["scopes"] == [ALICE] for t in got.values())


def test_mem0s_memories_export_one_scope_per_user(e: Engram, tmp_path: Path) -> None:
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps({"results": [
        {"id": "m1", "memory": "Is vegetarian", "user_id": "alice", "created_at": "2025-03-01T10:00:00Z",
         "categories": ["food"]},
        {"id": "m2", "memory": "Lives in Madrid", "user_id": "bob", "created_at": "2025-04-01T10:00:00-07:00"},
        {"id": "m3", "memory": "", "user_id": "bob"},
        {"id": "m4", "memory": "Nobody's", "user_id": None},
    ]}))  # fmt: skip
    report = run("mem0", path, e, operator(), "org/acme/user/{user_id}")
    assert report["mapped"] == {"memories": 2}
    assert report["skipped"] == {"a memory without text": 1, "a memory without user_id (the scope names one)": 1}
    got = turns(e)
    assert got["Is vegetarian"]["scopes"] == [ALICE] and got["Is vegetarian"]["said_at"].startswith("2025-03-01T10:00")
    assert got["Lives in Madrid"]["scopes"] == ["org/acme/user/bob"]
    assert got["Lives in Madrid"]["said_at"].startswith("2025-04-01T17:00")  # its offset kept
    alice = agent(e, ALICE)
    seen = e.memory.recall(alice, "Madrid vegetarian", 10, None, None, "bm25")["results"]
    assert [r["text"] for r in seen if "Madrid" in r["text"]] == []  # bob's stays bob's


def test_a_basic_memory_folder_of_notes(e: Engram, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    (notes / "drinks").mkdir(parents=True)
    (notes / "drinks" / "coffee.md").write_text(
        "---\ntitle: Coffee Brewing\ntype: note\ntags: [coffee, brewing]\npermalink: coffee-brewing\n---\n"
        "# Coffee Brewing\n\n## Observations\n- [method] Pour over gives more clarity #technique\n"
        "- [preference] Ethiopian beans taste fruity\n\n## Relations\n- pairs_with [[Chocolate]]\n"
        "See also [[Tea Brewing]] and [[Chocolate]].\n"
    )
    (notes / "tea.md").write_text("Tea Brewing needs water at 80 degrees.\n")
    (notes / "empty.md").write_text("---\ntitle: Empty\n---\n")
    report = run("basic-memory", notes, e, operator(), ALICE)
    assert report["mapped"] == {"documents": 2, "observations": 2, "relations": 2}
    assert report["skipped"] == {"an empty note": 1}
    got = turns(e)
    assert {"Coffee Brewing: Pour over gives more clarity #technique", "Coffee Brewing pairs with Chocolate.",
            "Coffee Brewing links to Tea Brewing."} <= set(got)  # fmt: skip
    docs = {i.data["title"]: i.data for i in scan(e.records, "acme", "document")}
    assert set(docs) == {"Coffee Brewing", "tea"}
    assert {"coffee", "brewing", "type:note"} <= set(docs["Coffee Brewing"]["labels"])


def chatgpt_export() -> list[dict[str, Any]]:
    def node(id_: str, parent: str | None, role: str, parts: list[Any], at: float) -> dict[str, Any]:
        return {"id": id_, "parent": parent, "children": [],
                "message": {"author": {"role": role}, "content": {"content_type": "text", "parts": parts},
                            "create_time": at}}  # fmt: skip

    mapping = {
        "root": {"id": "root", "parent": None, "children": ["sys"], "message": None},
        "sys": node("sys", "root", "system", ["You are ChatGPT."], 1.7e9),
        "u1": node("u1", "sys", "user", ["I moved to Lisbon last month."], 1.7e9 + 10),
        "a1": node("a1", "u1", "assistant", ["Welcome to Lisbon!"], 1.7e9 + 20),
        "a1b": node("a1b", "u1", "assistant", ["A discarded answer."], 1.7e9 + 21),
        "u2": node("u2", "a1", "user", [{"content_type": "image_asset_pointer"}], 1.7e9 + 30),
        "u3": node("u3", "u2", "user", ["I work at Globex."], 1.7e9 + 40),
    }
    return [{"id": "c-1", "title": "Moving", "create_time": 1.7e9, "mapping": mapping, "current_node": "u3"}]


def test_chatgpts_conversations_json(e: Engram, tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    report = run("chatgpt", path, e, operator(), ALICE)
    assert report["mapped"] == {"memories": 2, "threads": 1, "messages": 3}
    assert report["skipped"] == {"a system message": 1, "a message without text (an image, a file, a tool call)": 1}
    messages = [i.data["content"] for i in scan(e.records, "acme", "message")]
    assert sorted(messages) == sorted(["I moved to Lisbon last month.", "Welcome to Lisbon!", "I work at Globex."])
    got = turns(e)
    assert set(got) == {"I moved to Lisbon last month.", "I work at Globex."}  # the user's words, in memory
    assert got["I work at Globex."]["said_at"].startswith("2023-11-14T22:14")  # when it was said
    facts = {(i.data["key"], i.data["value"]) for i in scan(e.records, "acme", "attribute")}
    assert ("employer", "Globex") in facts


def test_claudes_conversations_json(e: Engram, tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"uuid": "u-1", "name": "Trip", "created_at": "2025-01-02T03:04:05Z", "chat_messages": [
        {"uuid": "m1", "sender": "human", "text": "My sister is called Carol.", "created_at": "2025-01-02T03:04:05Z"},
        {"uuid": "m2", "sender": "assistant", "text": "", "created_at": "2025-01-02T03:04:06Z",
         "content": [{"type": "text", "text": "Nice to meet Carol."}]},
        {"uuid": "m3", "sender": "human", "text": "", "content": [{"type": "image"}]},
    ]}]))  # fmt: skip
    report = run("claude", path, e, operator(), ALICE)
    assert report["mapped"] == {"memories": 1, "threads": 1, "messages": 2}
    assert report["skipped"] == {"a message without text (an image, a file, a tool call)": 1}
    assert set(turns(e)) == {"My sister is called Carol."}
    threads = [i.data for i in scan(e.records, "acme", "thread")]
    assert len(threads) == 1


def test_files_of_the_wrong_shape_are_refused(e: Engram, tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"conversations": []}))
    for system in ("chatgpt", "claude"):
        with pytest.raises(InvalidInput):
            run(system, path, e, operator(), ALICE)
    path.write_text("{broken")
    with pytest.raises(InvalidInput):
        run("mem0", path, e, operator(), ALICE)
    with pytest.raises(InvalidInput):
        run("basic-memory", path, e, operator(), ALICE)  # a file, not a folder
    with pytest.raises(InvalidInput):
        run("letta", path, e, operator(), ALICE)
    assert turns(e) == {}


def test_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(chatgpt_export()))
    data = tmp_path / "data"
    argv = ["import-from", "chatgpt", str(path), "--context", "acme", "--scope", ALICE, "--data-dir", str(data)]
    assert main(argv) == 2  # a scope nobody registered
    assert "not registered" in capsys.readouterr().err
    assert main(["scopes", "create", "--context", "acme", ALICE, "--data-dir", str(data)]) == 0
    argv = ["import-from", "chatgpt", str(path), "--context", "acme", "--scope", ALICE, "--data-dir", str(data)]
    assert main(argv) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["system"] == "chatgpt" and said["mapped"]["threads"] == 1


def test_an_item_the_service_refuses_is_skipped_with_the_reason_and_the_rest_imported(
    e: Engram, tmp_path: Path
) -> None:
    path = tmp_path / "conversations.json"
    huge = "word " * 20_000  # over a message's 32,000 characters
    path.write_text(json.dumps([{"uuid": "u-2", "name": "Long", "chat_messages": [
        {"sender": "human", "text": huge},
        {"sender": "human", "text": "I play the cello."},
    ]}]))  # fmt: skip
    report = run("claude", path, e, operator(), ALICE)
    assert report["mapped"]["messages"] == 1
    assert any(why.startswith("conversation_append refused it") for why in report["skipped"]), report
    assert "I play the cello." in turns(e)
