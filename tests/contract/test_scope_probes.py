"""Scopes inside one tenant, probed on every kind of object, on both adapter sets.

Bob (grant org/acme/user/bob) stores memories, an entity with an edge, a session, documents with their
chunks, a folder and a collection. Alice (grant org/acme/user/alice), in the same context, tries to list,
read, match (dedup, externalId, session ids), change and delete each. Nothing of Bob's is listed, read,
matched, changed or deleted, and no answer tells that it exists. One visibility rule decides every case
(`engram.kernel.scopes.can_see`); this suite is the probe set every new kind of object joins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engram.families.knowledge.documents import NewDocument
from engram.families.knowledge.search import Search
from engram.families.memory.service import Turn
from engram.kernel.caller import ANY, Caller
from engram.kernel.errors import Conflict, EngramError, NotFound
from engram.wiring import Engram
from tests.contract.conftest import eid

ALICE, BOB = "org/acme/user/alice", "org/acme/user/bob"
BOB_BYTES = b"Bob's private notes: the vault code is kept in the blue binder."


def callers(e: Engram) -> tuple[Caller, Caller, Caller]:
    e.identity.register_scopes("acme", [ALICE, BOB])
    keys = [e.identity.create_key(["acme"], "agent", [g])[1] for g in (ALICE, BOB)]
    _, m = e.identity.create_key(["acme"], "management", ["org/acme"])
    alice, bob = (e.identity.enter(p, "acme", ANY, "t") for p in keys)
    return alice, bob, e.identity.enter(m, "acme", ANY, "t")


def hidden(call: Callable[[], Any]) -> EngramError:
    """The call fails as if the object did not exist."""
    with pytest.raises(EngramError) as info:
        call()
    assert isinstance(info.value, NotFound), info.value
    return info.value


@pytest.fixture
def world(both: Engram) -> dict[str, Any]:
    e = both
    alice, bob, manager = callers(e)
    bob_memory = e.memory.store(bob, Turn("My wife is Carol. I live in Oslo.", session_id="bob-session-1"), None)
    folder = e.documents.folder_create(bob, "bob-folder", None, None, None)
    doc = e.documents.ingest(
        bob, NewDocument(BOB_BYTES, "Bob notes", collection="bobcoll", folder_id=folder["id"], external_id="bob-ext")
    )
    shared = e.documents.ingest(bob, NewDocument(b"Bob's text in the default collection.", "Bob default"))
    e.queue.join()
    chunk_id = e.documents.chunks(bob, doc["id"], None, 10)["chunks"][0]["id"]
    return {
        "e": e,
        "alice": alice,
        "bob": bob,
        "manager": manager,
        "doc": doc["id"],
        "shared": shared["id"],
        "chunk": chunk_id,
        "folder": folder["id"],
        "memory": bob_memory,
    }


def test_entities_and_edges(world: dict[str, Any]) -> None:
    e, alice, bob = world["e"], world["alice"], world["bob"]
    node = e.documents.node(bob, "Person", "bob")
    # his wife, and (issue #23) where he lives: an attribute whose value names an entity is an edge too
    assert sorted(edge["type"] for edge in node["edges"]) == ["lives_in", "wife"] and "scopes" not in node["node"]
    assert "version" not in node["node"]  # it would count mentions from scopes the caller cannot see
    hidden(lambda: e.documents.node(alice, "Person", "bob"))
    hidden(lambda: e.documents.node(alice, "Person", "carol"))
    # alice mentions carol herself: she sees the node, never bob's edge from it or to it
    e.memory.store(alice, Turn("I met Carol at the conference."), None)
    assert e.documents.node(alice, "Person", "alice")["edges"] == []
    hidden(lambda: e.documents.node(alice, "Person", "bob"))
    # the entity tools: Bob's entities stay unseen; Carol, whom both mention, counts Alice's mentions only
    hidden(lambda: e.entities.query(alice, "bob", None))
    hidden(lambda: e.entities.relationships(alice, "Person:bob", "both", None))
    e.memory.store(alice, Turn("My sister is Carol."), None)
    assert e.entities.query(alice, "carol", None)["entity"]["mention_count"] == 1
    assert e.entities.query(bob, "carol", None)["entity"]["mention_count"] == 1
    edges = e.entities.relationships(alice, "Person:carol", "both", None)["relationships"]
    assert [r["type"] for r in edges] == ["sister"]  # hers; Bob's "wife" edge stays unseen
    assert "mentions" not in e.documents.node(alice, "Person", "carol")["node"]


def test_a_shared_entity_changes_only_within_the_callers_view(world: dict[str, Any]) -> None:
    """Issue #22, class 4: Bob merged "Zelda Private", whom Alice mentions too, into his own Person:bob — Alice's
    relation then pointed at Bob's entity and Zelda left her view. A key changes an entity only when it sees
    all of it; otherwise 409 `in_use`, saying nothing of what it cannot see, and nobody's view changes."""
    e, alice, bob, manager = world["e"], world["alice"], world["bob"], world["manager"]
    e.memory.store(alice, Turn("My sister is Zelda Private."), None)
    e.memory.store(bob, Turn("My friend is Zelda Private."), None)
    zelda = e.entities.query(alice, "Zelda Private", None)["entity"]["id"]
    before_alice = e.entities.relationships(alice, zelda, "both", None)
    listed = {x["id"] for x in e.entities.list(alice, None, "name", 100, 0)["entities"]}
    for change in (
        lambda: e.entities.merge(bob, "Person:bob", zelda),
        lambda: e.entities.merge(bob, zelda, "Person:bob"),
        lambda: e.entities.update(bob, zelda, "Zelda Bob-Renamed", None, None),
        lambda: e.entities.update(bob, zelda, None, "bob's description", {"bob": True}),
    ):
        with pytest.raises(Conflict) as refused:
            change()
        assert refused.value.code == "in_use" and "alice" not in refused.value.message.lower()
    assert e.entities.relationships(alice, zelda, "both", None) == before_alice
    assert {x["id"] for x in e.entities.list(alice, None, "name", 100, 0)["entities"]} == listed
    assert e.entities.query(alice, "Zelda Private", None)["entity"]["name"] == "Zelda Private"
    hidden(lambda: e.entities.query(alice, "bob", None))
    # what Bob alone mentions, Bob may merge; the manager, who sees both scopes, may merge the shared one
    e.memory.store(bob, Turn("My friend is Zed Private."), None)
    merged = e.entities.merge(bob, "Person:bob", e.entities.query(bob, "Zed Private", None)["entity"]["id"])
    assert merged["kept_entity_id"] == eid(e, "Person", "bob")
    e.memory.store(alice, Turn("My sister is Zelda."), None)
    assert e.entities.merge(manager, zelda, "Person:zelda")["kept_entity_id"] == zelda


def test_a_shared_entity_fed_by_both_scopes_loses_only_the_deleted_sources_mentions(world: dict[str, Any]) -> None:
    """Issue #23: the graph every source feeds keeps the one rule. Alice's and Bob's documents both name Jane
    Smith; Bob deletes his: Alice's view of Jane (count, sentence, sources, edge) is unchanged, and Bob no longer
    sees Jane at all (what is left of her is Alice's)."""
    e, alice, bob = world["e"], world["alice"], world["bob"]
    mine = e.documents.ingest(alice, NewDocument(b"Jane Smith works at Initech.", "Alice's"))
    his = e.documents.ingest(bob, NewDocument(b"Jane Smith lives in Oslo.", "Bob's"))
    e.queue.join()
    before = e.entities.query(alice, "Jane Smith", None)["entity"]
    assert before["mention_count"] == 1 and [s["id"] for s in before["sources"]] == [mine["id"]]
    assert e.entities.query(bob, "Jane Smith", None)["entity"]["sources"] == [{"kind": "document", "id": his["id"]}]
    e.documents.delete(bob, his["id"])
    e.queue.join()
    assert e.entities.query(alice, "Jane Smith", None)["entity"] == before
    assert [r["type"] for r in e.entities.relationships(alice, "Person:jane smith", "both", None)["relationships"]] == [
        "works_at"]  # fmt: skip
    hidden(lambda: e.entities.query(bob, "Jane Smith", None))


def test_memories_attributes_and_profile(world: dict[str, Any]) -> None:
    e, alice = world["e"], world["alice"]
    found = e.memory.recall(alice, "where does bob live, who is his wife", k=10)
    assert "Oslo" not in found["context"] and "Carol" not in found["context"] and found["results"] == []
    assert all(not v for v in e.memory.profile(alice, None).values())
    assert e.memory.forget(alice, "lives in Oslo", None)["deleted"] == 0
    assert "Oslo" in e.memory.recall(world["bob"], "where does bob live", k=5)["context"]


def test_documents_and_chunks(world: dict[str, Any]) -> None:
    e, alice, doc = world["e"], world["alice"], world["doc"]
    hidden(lambda: e.documents.get(alice, doc))
    hidden(lambda: e.documents.chunks(alice, doc, None, 10))
    hidden(lambda: e.documents.chunk(alice, world["chunk"]))
    hidden(lambda: e.documents.chunk(alice, f"{doc}#00000"))
    hidden(lambda: e.documents.update(alice, doc, {"title": "mine now"}, None))
    hidden(lambda: e.documents.delete(alice, doc))
    hidden(lambda: e.documents.history(alice, doc))
    assert [d for d in e.documents.all_documents(alice) if d["id"] in (doc, world["shared"])] == []
    for mode in ("bm25", "hybrid"):
        assert e.documents.search(alice, Search("vault code blue binder", mode, 10))["results"] == []
    assert e.documents.get(world["bob"], doc)["title"] == "Bob notes"  # untouched


def test_dedup_and_external_ids_are_per_scope_set(world: dict[str, Any]) -> None:
    e, alice, doc = world["e"], world["alice"], world["doc"]
    same = e.documents.ingest(alice, NewDocument(BOB_BYTES, "Mine", collection="bobcoll"))
    assert same["deduplicated"] is False and same["id"] != doc  # no content oracle
    assert e.documents.get(alice, same["id"])["title"] == "Mine"  # stored where she can read it
    ext = e.documents.ingest(alice, NewDocument(b"Alice's own text.", "A", external_id="bob-ext"))
    assert ext["deduplicated"] is False and ext["id"] != doc
    again = e.documents.ingest(alice, NewDocument(b"Alice's own text.", "A", external_id="bob-ext"))
    assert again["deduplicated"] is True and again["id"] == ext["id"]  # idempotent within her scopes
    bob_again = e.documents.ingest(world["bob"], NewDocument(BOB_BYTES, "x", collection="bobcoll"))
    assert bob_again["id"] == doc and bob_again["deduplicated"] is True


def test_folders(world: dict[str, Any]) -> None:
    e, alice, folder = world["e"], world["alice"], world["folder"]
    assert all(f["id"] != folder for f in e.documents.folder_list(alice, None))
    hidden(lambda: e.documents.folder_update(alice, folder, {"name": "renamed"}))
    hidden(lambda: e.documents.folder_delete(alice, folder))
    hidden(lambda: e.documents.folder_create(alice, "child", folder, None, None))
    hidden(lambda: e.documents.ingest(alice, NewDocument(b"into bob's folder", "x", folder_id=folder)))
    [mine] = [f for f in e.documents.folder_list(world["bob"], None) if f["id"] == folder]
    assert mine["name"] == "bob-folder" and "scopes" not in mine
    # bob's own folder holds his document: no delete leaves it pointing nowhere
    with pytest.raises(Conflict):
        e.documents.folder_delete(world["bob"], folder)


def test_collections(world: dict[str, Any]) -> None:
    e, alice, manager = world["e"], world["alice"], world["manager"]
    listed = [c["name"] for c in e.documents.collections(alice, "list", None, None)["collections"]]
    assert "bobcoll" not in listed
    hidden(lambda: e.documents.collections(alice, "stats", "bobcoll", None))
    hidden(lambda: e.documents.collections(alice, "delete", "bobcoll", None, force=True))
    with pytest.raises(Conflict):  # the name is taken; whose, she is not told
        e.documents.collections(alice, "create", "bobcoll", None)
    # the default collection holds documents of both: alice sees it, counts only hers, cannot delete it
    e.documents.ingest(alice, NewDocument(b"Alice's text in the default collection.", "Alice default"))
    [default] = [c for c in e.documents.collections(alice, "list", None, None)["collections"] if c["name"] == "default"]
    assert default["document_count"] == 1
    with pytest.raises(Conflict) as refused:
        e.documents.collections(alice, "delete", "default", None, force=True)
    assert "bob" not in refused.value.message.lower() and refused.value.code == "in_use"
    assert e.documents.get(world["bob"], world["shared"])["collection"] == "default"
    # the manager sees everything under org/acme, so may delete it with its documents
    out = e.documents.collections(manager, "delete", "bobcoll", None, force=True)
    assert out["documents_deleted"] == 1
    hidden(lambda: e.documents.get(world["bob"], world["doc"]))


def test_sessions(world: dict[str, Any]) -> None:
    e, alice, bob = world["e"], world["alice"], world["bob"]
    e.memory.store(alice, Turn("Joining as I please.", session_id="bob-session-1"), None)
    assert "bob-session-1 " in e.causantic.list_sessions(bob, BOB) and "1 chunks" in e.causantic.list_sessions(bob, BOB)
    assert "No sessions found" not in e.causantic.list_sessions(alice, ALICE)
    assert "Oslo" not in e.causantic.reconstruct(alice, ALICE, session_id="bob-session-1")
    # the same answer as for a project nobody has
    assert e.causantic.list_sessions(alice, BOB) == f'No sessions found for project "{BOB}".'
    assert e.causantic.list_sessions(alice, "org/acme/user/nobody").startswith("No sessions found")


def test_context_keys(world: dict[str, Any]) -> None:
    e, alice, bob = world["e"], world["alice"], world["bob"]
    e.workctx.set(bob, "vault", {"code": 1234}, None, None)
    hidden(lambda: e.workctx.get(alice, "vault", None))
    hidden(lambda: e.workctx.history(alice, "vault", None, 5))
    assert e.workctx.keys(alice, "", None, 100)["keys"] == []
    e.workctx.merge(alice, "vault", {"mine": 1}, "merge_deep", None)  # Alice's own key: Bob's is untouched
    assert e.workctx.get(bob, "vault", None)["value"] == {"code": 1234}


def test_threads_and_messages(world: dict[str, Any]) -> None:
    e, alice, bob = world["e"], world["alice"], world["bob"]
    e.conversation.append(bob, "bob-thread", "user", "The vault code is in the blue binder.", None)
    hidden(lambda: e.conversation.history(alice, "bob-thread", 50, None, None))
    hidden(lambda: e.conversation.summarize(alice, "bob-thread", 0))
    hidden(lambda: e.conversation.search(alice, "vault", "bob-thread", None, 5))
    assert e.conversation.search(alice, "vault code blue binder", None, None, 10)["results"] == []


def test_records_schemas_history_and_principals(world: dict[str, Any]) -> None:
    e, alice, bob = world["e"], world["alice"], world["bob"]
    note = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    e.schemas.create("acme", "cli", "note", "record", note, [{"field": "code", "ops": ["exact", "prefix"]}],
                     "keyword", None, "")  # fmt: skip
    rec = e.typed.create(bob, "note", {"code": "vault-1234"}, "bob-note", None, None, None)
    hidden(lambda: e.typed.get(alice, rec["id"]))
    hidden(lambda: e.typed.update(alice, rec["id"], {"code": "x"}, None, None, None))
    hidden(lambda: e.typed.delete(alice, rec["id"], None))
    hidden(lambda: e.history.versions(alice, rec["id"], 10, None))
    hidden(lambda: e.history.versions(alice, world["doc"], 10, None))
    assert e.typed.query(alice, "note", "code", "prefix", "vault", None, None, False, 10, None)["items"] == []
    assert e.typed.query(alice, "note", None, "list", None, None, None, False, 10, None)["items"] == []
    mine = e.typed.create(alice, "note", {"code": "vault-1234"}, "bob-note", None, None, None)
    assert mine["created"] is True and mine["id"] != rec["id"]  # Bob's externalId is not matched, nor confirmed
    found = e.documents.search(alice, Search("vault 1234", kinds=("chunk", "record")))["results"]
    assert rec["id"] not in {r.get("record_id") for r in found}
    e.identity.register_scopes("acme", ["org/acme/user/bob"])
    hidden(lambda: e.principals.lookup(alice, "bob", None, None, None))  # another user's principal
    assert e.principals.lookup(bob, "bob", None, None, None)["id"] == "org/acme/user/bob"
    assert e.schemas.catalog(alice)["schemas"][0]["type"] == "note"  # type definitions: the context's


def test_workspace_files_sessions_and_decisions(world: dict[str, Any]) -> None:
    from engram.families.workspace.collab import Edit
    from engram.families.workspace.files import NewFile

    e, alice, bob = world["e"], world["alice"], world["bob"]
    e.workspace.write(bob, NewFile("vault/code.py", "CODE = 1234  # the vault\n", "bob's"))
    hidden(lambda: e.workspace.file(alice, "vault/code.py"))
    assert e.workspace.paths(alice) == [] and e.workspace.search_chunks(alice, "vault code", "bm25", 10) == []
    assert e.workspace.dependents_of(alice, "vault/code.py") == []
    session = e.collab.create_session(bob, "s", ["b"], ["vault/code.py"], "editing", True)["session_id"]
    hidden(lambda: e.collab.sync(alice, "vault/code.py", [Edit("insert", 0, "#")], None, "a", session))
    assert e.collab.sessions(alice) == []
    decision = e.collab.record_decision(bob, {"decision": "Move the vault", "reasoning": "Safer.", "context": {},
                                             "confidence": 0.5, "alternatives": [], "impact": "low"})  # fmt: skip
    hidden(lambda: e.collab.decision(alice, decision["decision_id"]))


def test_every_write_is_of_a_declared_kind_and_scoped_kinds_carry_scopes(both: Engram) -> None:
    """A store that checks each write the services make while a user does everything above."""
    e = both
    original = e.records.transact
    seen: set[str] = set()

    def checked(writes: Any, now: Any) -> Any:
        for w in writes:
            assert w.kind in e.kinds, f"kind {w.kind!r} is not declared in engram.kernel.kinds"
            if e.kinds[w.kind].access == "scoped":
                assert w.data.get("scopes"), f"a {w.kind} written without scopes: {w.data}"
            seen.add(w.kind)
        return original(writes, now)

    e.records.transact = checked  # type: ignore[method-assign]
    alice, bob, manager = callers(e)
    e.memory.store(bob, Turn("My wife is Carol. I live in Oslo. I like tea.", session_id="s1"), None)
    e.memory.store(bob, Turn("Actually I moved to Bergen."), None)
    e.memory.reflect(manager, "tea", persist=True, lens=None)
    e.memory.forget(bob, "Bergen", None)
    folder = e.documents.folder_create(bob, "f", None, None, None)
    e.documents.folder_update(bob, folder["id"], {"name": "g"})
    doc = e.documents.ingest(bob, NewDocument(b"Some text.", "T", collection="c", folder_id=folder["id"]))
    e.documents.collections(alice, "create", "mine", None)
    e.documents.update(bob, doc["id"], {"text": "Other text."}, None)
    e.queue.join()
    e.documents.delete(bob, doc["id"])
    e.queue.join()
    e.workctx.set(bob, "plan", {"a": 1}, 60, "run-1")
    e.workctx.merge(bob, "plan", {"b": 2}, "merge_deep", "run-1")
    for text in ("One.", "Two.", "Three."):
        e.conversation.append(bob, "thread-1", "user", text, None)
    e.conversation.summarize(bob, "thread-1", 1)
    e.schemas.create("acme", "cli", "note", "record", {"type": "object"}, [], "keyword", None, "")
    rec = e.typed.create(bob, "note", {"a": 1}, "ext", None, None, None)
    e.typed.update(bob, rec["id"], {"a": 2}, None, None, None)
    e.typed.delete(bob, rec["id"], None)
    from engram.families.workspace.collab import Edit
    from engram.families.workspace.files import NewFile

    e.workspace.write(bob, NewFile("a.py", "X = 1\n", "r"))
    e.workspace.write(bob, NewFile("b.py", "import a\n", "r"))
    e.collab.sync(bob, "a.py", [Edit("insert", 0, "# hi\n")], None, "agent-1", None)
    e.collab.record_decision(bob, {"decision": "d", "reasoning": "r", "context": {}, "confidence": 0.5,
                                   "alternatives": [], "impact": "low"})  # fmt: skip
    kinds = {"turn", "attribute", "entity", "relation", "session", "document", "folder", "collection", "chunk"}
    assert kinds | {"ctxkey", "thread", "message", "ealias", "schema", "record", "rlookup", "rextid"} <= seen
    assert {"wfile", "wdep", "wsession", "wop", "wclock", "decision"} <= seen
