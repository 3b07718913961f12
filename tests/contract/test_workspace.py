"""Agrama's code workspace (`engram.families.workspace.files`, `collab`, `codeviews`) on both adapter sets: versions
with provenance and backups, syntax refused with its place and nothing written, paths that escape refused,
the import graph kept in the write's transaction, many concurrent writers, CRDT sessions where three agents'
interleaved edits converge whatever their order, decisions, scopes."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from engram.families.workspace.collab import OP, Edit
from engram.families.workspace.files import NewFile
from engram.families.workspace.shapes import DEP, FILE
from engram.kernel.caller import Caller
from engram.kernel.errors import InvalidInput, NotFound
from engram.wiring import Engram
from tests.concurrency import together
from tests.contract.conftest import ALICE, BOB  # noqa: F401
from tests.contract.conftest import two_agents as callers


def write(e: Engram, who: Caller, path: str, text: str, **kw: Any) -> dict[str, Any]:
    return e.workspace.write(who, NewFile(path, text, kw.pop("reason", "test"), **kw))


def args(**kw: Any) -> Any:
    return SimpleNamespace(**kw)


def test_versions_provenance_backups_and_history(both: Engram) -> None:
    e, (alice, _) = both, callers(both)
    first = write(e, alice, "src/app.py", "def main():\n    return 1\n", agent_id="claude", reason="start")
    assert first["item"].version == 1 and first["backup_path"] is None
    second = write(e, alice, "src/app.py", "def main():\n    return 2\n", agent_id="cursor", reason="fix")
    assert second["item"].version == 2 and second["backup_path"].startswith("src/app.py.backup.")
    prov = second["item"].data["provenance"]
    assert (prov["agent_id"], prov["reason"], prov["principal"]) == ("cursor", "fix", "agent") and prov["key_id"]
    old = e.codeviews.read(alice, args(path=second["backup_path"], include_semantic_context=False,
                                       include_dependencies=False, include_history=False,
                                       include_collaborative_context=False))  # fmt: skip
    assert old["content"] == "def main():\n    return 1\n"
    hist = e.codeviews.history(alice, args(entity_id="src/app.py", time_range=None, change_types=["create", "update"],
                                           include_diff=True, max_results=10))  # fmt: skip
    assert [h["version"] for h in hist["history"]] == [2, 1]
    assert "-    return 1\n+    return 2\n" in hist["history"][0]["diff"]
    missing = e.codeviews.read(alice, args(path="src/none.py", include_semantic_context=False,
                                           include_dependencies=False, include_history=False,
                                           include_collaborative_context=False))  # fmt: skip
    assert missing == {"path": "src/none.py", "exists": False, "content": None}


@pytest.mark.parametrize(
    ("path", "text", "where"),
    [
        ("a.py", "def f(:\n    pass\n", (1, 7)),
        ("b.js", "function f() {\n  return [1, 2;\n}\n", (2, 15)),
        ("c.go", "package c\n\nfunc f() {\n\treturn 1 +\n}\n", None),
        ("d.rs", "fn main() {\n    let x = ;\n}\n", (2, 11)),
        ("e.java", "class E {\n  void f() { int x = ; }\n}\n", None),
        ("f.c", "int main() {\n  return 0\n}\n", None),
        ("g.ts", "const x: number = ;\n", None),
        ("h.zig", "pub fn f( void {}\n", None),
    ],
)
def test_syntax_errors_are_refused_with_their_place_and_nothing_is_written(
    both: Engram, path: str, text: str, where: tuple[int, int] | None
) -> None:
    e, (alice, _) = both, callers(both)
    with pytest.raises(InvalidInput) as info:
        write(e, alice, path, text)
    assert info.value.code == "syntax_error" and "syntax error" in info.value.message
    assert info.value.details["line"] >= 1 and info.value.details["column"] >= 1
    if where is not None:
        assert (info.value.details["line"], info.value.details["column"]) == where
    assert e.records.query("acme", FILE).items == []
    assert write(e, alice, path, text, validate_syntax=False)["item"].version == 1  # the caller may insist


def test_paths_that_leave_the_workspace_and_oversize_content_are_refused(both: Engram) -> None:
    e, (alice, _) = both, callers(both)
    for bad in ("../etc/passwd", "/etc/passwd", "a/../../b.py", "a\x00b.py", "C:/x.py", "a\\b.py", "", "..", "."):
        with pytest.raises(InvalidInput):
            write(e, alice, bad, "x = 1\n")
    with pytest.raises(InvalidInput, match="limit"):
        write(e, alice, "big.txt", "x" * (1024 * 1024 + 1))
    with pytest.raises(InvalidInput, match="reason"):
        write(e, alice, "a.py", "x = 1\n", reason="  ")
    assert write(e, alice, "./a/./b//c.py", "x = 1\n")["item"].data["path"] == "a/b/c.py"  # normalised
    assert [i.data["path"] for i in e.records.query("acme", FILE).items] == ["a/b/c.py"]


def test_the_import_graph_follows_every_write(both: Engram) -> None:
    e, (alice, _) = both, callers(both)
    write(e, alice, "pkg/c.py", "X = 1\n")
    write(e, alice, "pkg/b.py", "from pkg import c\nimport pkg.c\n")
    a = write(e, alice, "pkg/a.py", "import json\nfrom pkg import b\nfrom . import c\n")
    assert a["item"].data["deps"] == ["pkg/b.py", "pkg/c.py"] and a["item"].data["externals"] == ["json"]
    deps = e.codeviews.dependencies(alice, args(file_path="pkg/c.py", max_depth=3, direction="bidirectional",
                                                include_impact_analysis=True))  # fmt: skip
    assert deps["dependents"] == [{"path": "pkg/a.py", "depth": 1}, {"path": "pkg/b.py", "depth": 1}]
    assert deps["impact_analysis"]["files_affected"] == 2
    changed = write(e, alice, "pkg/a.py", "import json\n")  # a no longer imports b or c
    assert changed["changes"] == ["removed: .c", "removed: pkg.b"]
    assert e.workspace.dependents_of(alice, "pkg/c.py") == ["pkg/b.py"]
    assert sorted(i.id.split("|", 1)[1] for i in e.records.query("acme", DEP).items) == ["pkg/c.py\x1fpkg/b.py"]
    js = write(e, alice, "web/app.ts", "import { x } from './util';\nimport fs from 'fs';\n")
    assert js["item"].data["externals"] == ["./util", "fs"]  # ./util does not exist yet
    write(e, alice, "web/util.ts", "export const x = 1;\n")
    assert write(e, alice, "web/app.ts", "import { x } from './util';\n")["item"].data["deps"] == ["web/util.ts"]


def test_many_writers_of_one_file_all_land(both: Engram) -> None:
    e, (alice, _) = both, callers(both)
    write(e, alice, "lib/dep.py", "Y = 0\n")
    errors = together(12, lambda i: write(e, alice, "lib/hot.py", f"from lib import dep\nX = {i}\n", agent_id=f"a{i}"))
    assert errors == []
    item = e.workspace.file(alice, "lib/hot.py")
    assert item.version == 12 and len(e.records.history("acme", FILE, item.id)) == 12
    assert e.workspace.dependents_of(alice, "lib/dep.py") == ["lib/hot.py"]  # one edge, however many writers


def test_three_agents_interleaved_edits_converge_whatever_their_order(both: Engram) -> None:
    import base64

    import pycrdt

    e, (alice, _) = both, callers(both)
    write(e, alice, "doc.txt", "alpha beta gamma\n")
    session = e.collab.create_session(alice, "s", ["a1", "a2", "a3"], ["doc.txt"], "editing", True)["session_id"]
    base: dict[str, int] = {}
    plans = {
        "a1": [Edit("insert", 0, "ONE "), Edit("insert", 6, "[1]")],
        "a2": [Edit("insert", 11, "TWO "), Edit("delete", 0, length=1)],
        "a3": [Edit("insert", 17, " THREE"), Edit("insert", 5, "-3-")],
    }

    def agent(i: int) -> None:
        name = f"a{i + 1}"
        for n, edit in enumerate(plans[name]):  # each agent's second edit sees its own first
            seen = dict(base, **{name: n})
            e.collab.sync(alice, "doc.txt", [Edit(edit.type, edit.position, edit.content, edit.length, seen)], None,
                          name, session)  # fmt: skip

    assert together(3, agent) == []
    final = e.collab.sync(alice, "doc.txt", [Edit("insert", 0, "")], None, "a1", session)
    ops = e.records.query("acme", OP, prefix=f"{session}|doc.txt|", limit=100).items
    assert len(ops) == 1 + 6 + 1
    texts = set()
    for order in itertools.islice(itertools.permutations(ops), 0, 720, 37):  # many orders of the same log
        doc: Any = pycrdt.Doc()
        for op in order:
            doc.apply_update(base64.b64decode(op.data["update"]))
        texts.add(str(doc.get("text", type=pycrdt.Text)))
    assert texts == {final["content"]}
    for piece in ("ONE ", "[1]", "TWO ", " THREE", "-3-"):
        assert piece in final["content"]
    assert not final["content"].startswith("alpha")  # a2 deleted the base's first character ("a")
    saved = e.workspace.file(alice, "doc.txt")
    assert e.workspace.content(saved) == final["content"]
    assert sorted(saved.data["provenance"]["contributors"]) == ["a1", "a2", "a3"]
    assert final["vector_clock"] == {"a1": 3, "a2": 2, "a3": 2}


def test_twenty_parallel_syncs_all_land_in_the_file(both: Engram) -> None:
    """Issue #22, class 6: 20 parallel `sync_document` calls on one session all succeeded, but the file lacked
    some of them (each call wrote the file from its own view of the log; the last writer won). The file is now
    written from the whole merged log with a version check, again on conflict: it holds every acknowledged
    operation, with no later sync needed."""
    e, (alice, _) = both, callers(both)
    write(e, alice, "notes.md", "# Notes\n")
    session = e.collab.create_session(alice, "s", [], ["notes.md"], "editing", True)["session_id"]
    acknowledged: list[str] = []

    def agent(i: int) -> None:
        out = e.collab.sync(alice, "notes.md", [Edit("insert", 0, f"<op{i:02d}>")], {}, f"agent-{i}", session)
        assert out["success"] and f"<op{i:02d}>" in out["content"]
        acknowledged.append(f"<op{i:02d}>")

    assert together(20, agent) == []
    assert len(acknowledged) == 20
    saved = e.workspace.content(e.workspace.file(alice, "notes.md"))
    assert [m for m in acknowledged if m not in saved] == []
    assert saved.endswith("# Notes\n")
    assert len(e.records.query("acme", OP, prefix=f"{session}|notes.md|", limit=100).items) == 21


class CountingEmbedder:
    """A fake of the Embedder port that counts the windows it embeds (deterministic unit vectors)."""

    model_id, dim = "counting", 384

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: Any) -> Any:
        import numpy as np

        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def test_a_large_write_does_work_linear_in_the_file_and_embeds_in_the_background(both: Engram) -> None:
    """Issue #22, class 7: `write_code` of 20,000 `import` lines took 23 s: every window was embedded before
    the write answered, and imports were found by a walk over every node in Python. Now the imports come from
    one tree-sitter query, their resolution is linear, and a file of more than SYNC_EMBED_WINDOWS windows is
    keyword-searchable at once with its vectors from a queued job."""
    from engram.families.workspace.shapes import SYNC_EMBED_WINDOWS

    e, (alice, _) = both, callers(both)
    counting = CountingEmbedder()
    e.workspace.embedder = counting
    write(e, alice, "lib/mod7.py", "X = 7\n")
    counting.texts = 0
    text = "".join(f"import mod{i}\n" for i in range(20_000)) + "from lib import mod7\n"
    out = write(e, alice, "big.py", text)
    assert counting.texts <= SYNC_EMBED_WINDOWS  # none of its ~330 windows on the write's path
    assert out["item"].data["deps"] == ["lib/mod7.py"] and len(out["external"]) == 20_000
    assert e.workspace.dependents_of(alice, "lib/mod7.py") == ["big.py"]
    hits = e.workspace.search_chunks(alice, "mod19999", "bm25", 5)
    assert hits and hits[0].metadata["path"] == "big.py"  # keyword-searchable when the write answers
    e.queue.join()
    assert counting.texts >= out["item"].data["chunks"]  # the vectors followed from the queue
    small = write(e, alice, "small.py", "import json\n")  # a small file is embedded before the answer
    assert small["item"].data["chunks"] <= SYNC_EMBED_WINDOWS


def test_a_burst_of_syncs_embeds_nothing_on_its_path_and_the_last_version_once(both: Engram) -> None:
    """Issue #26: `sync_document` took 92 ms at p50 on a growing document: every sync read the whole operation
    log twice and embedded every window of the file before answering. Now a sync reads the log from its
    snapshot on, and the file's vectors come from a job a moment later, which only the last version of a
    burst of edits runs (each earlier one finds the file moved on)."""
    e, (alice, _) = both, callers(both)
    counting = CountingEmbedder()
    e.workspace.embedder = counting
    write(e, alice, "notes.md", "# Notes\n")
    session = e.collab.create_session(alice, "s", [], ["notes.md"], "editing", True)["session_id"]
    counting.texts = 0
    clock: dict[str, int] = {}
    for i in range(60):  # past a snapshot (every 50 operations)
        out = e.collab.sync(alice, "notes.md", [Edit("insert", 0, f"line {i}\n")], clock, "agent", session)
        clock = out["vector_clock"]
    assert counting.texts == 0  # nothing embedded on a sync's path
    assert out["content"] == "".join(f"line {i}\n" for i in reversed(range(60))) + "# Notes\n"
    hits = e.workspace.search_chunks(alice, "notes", "bm25", 5)
    assert hits and hits[0].metadata["path"] == "notes.md"  # keyword-searchable when the sync answers
    counting.texts = 0  # (the search embedded its query, to score with)
    e.queue.join()
    chunks = e.workspace.file(alice, "notes.md").data["chunks"]
    assert counting.texts == chunks == 2  # the last version's windows, once
    found = e.workspace.search_chunks(alice, "line", "vector", 5)
    assert found and found[0].metadata["path"] == "notes.md"  # and the vectors are there


def test_a_file_with_more_imports_than_one_transaction_holds(both: Engram) -> None:
    """DynamoDB takes 50 writes a transaction: a file importing 60 workspace modules was refused there. The
    file, its job and the first edges commit together; the rest follow, carried by the job."""
    e, (alice, _) = both, callers(both)
    e.workspace.import_files(alice, [(f"pkg/m{i}.py", f"X = {i}\n") for i in range(60)], "seed")
    write(e, alice, "main.py", "".join(f"from pkg import m{i}\n" for i in range(60)))
    assert all(e.workspace.dependents_of(alice, f"pkg/m{i}.py") == ["main.py"] for i in range(60))
    write(e, alice, "main.py", "".join(f"from pkg import m{i}\n" for i in range(5)))
    assert [i for i in range(60) if e.workspace.dependents_of(alice, f"pkg/m{i}.py")] == list(range(5))
    e.queue.join()  # nothing left behind for the queue to finish


def test_imports_of_every_language(both: Engram) -> None:
    from engram.families.workspace import code

    cases = {
        "a.py": ("import os, a.b as c\nfrom .x import y\nfrom m import *\ndef f():\n    import z\n",
                 ["os", "a.b", ".x.y", "m", "z"]),
        "a.ts": ('import a from "./a";\nexport * from "./b";\nconst c = require("./c");\nimport("./d");\nf("x");\n',
                 ["./a", "./b", "./c", "./d"]),
        "a.go": 'package a\nimport (\n  "fmt"\n  x "a/b"\n)\n', "a.rs": "use std::io;\nmod util;\nmod inner {}\n",
        "A.java": "import java.util.List;\nimport static a.B.c;\nclass A {}\n",
        "a.c": '#include <stdio.h>\n#include "util.h"\n',
        "a.zig": 'const s = @import("std");\nconst n = @sizeOf(u8);\n',
    }  # fmt: skip
    expected = {"a.go": ["fmt", "a/b"], "a.rs": ["std::io", "mod util"], "A.java": ["java.util.List", "a.B.c"],
                "a.c": ["stdio.h", "util.h"], "a.zig": ["std"]}  # fmt: skip
    for path, case in cases.items():
        text, want = case if isinstance(case, tuple) else (case, expected[path])
        assert code.imports(path, text) == want, path


def test_decisions_are_versioned_scoped_and_searchable(both: Engram) -> None:
    e, (alice, bob) = both, callers(both)
    fields = {"decision": "Adopt arena allocators", "reasoning": "Fewer frees.", "context": {}, "confidence": 0.8,
              "alternatives": [], "impact": "high"}  # fmt: skip
    made = e.collab.record_decision(alice, fields)
    assert e.collab.decision(alice, made["decision_id"]).data["impact"] == "high"
    query = args(entity_id=made["decision_id"], time_range=None, change_types=["create", "update"], include_diff=True,
                 max_results=5)  # fmt: skip
    hist = e.codeviews.history(alice, query)
    assert hist["entity_type"] == "decision" and hist["history"][0]["change_type"] == "create"
    with pytest.raises(NotFound):
        e.collab.decision(bob, made["decision_id"])


def test_another_users_workspace_is_unseen(both: Engram) -> None:
    e, (alice, bob) = both, callers(both)
    write(e, bob, "secret/plan.py", "PLAN = 'vault'\n")
    assert e.workspace.paths(alice) == []
    with pytest.raises(NotFound):
        e.workspace.file(alice, "secret/plan.py")
    assert e.codeviews.read(alice, args(path="secret/plan.py", include_semantic_context=False,
                                        include_dependencies=False, include_history=False,
                                        include_collaborative_context=False))["exists"] is False  # fmt: skip
    assert e.workspace.search_chunks(alice, "vault plan", "bm25", 10) == []
    mine = write(e, alice, "secret/plan.py", "PLAN = 'mine'\n")  # the same path in her own workspace
    assert mine["item"].version == 1


def test_an_index_job_out_of_time_queues_the_files_it_did_not_reach(
    both: Engram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import's batch of files is one embedding job; on the Lambda worker (90 s) a large batch took longer than
    the function may run and was cut off each time, none of its vectors kept. Now a run short of time indexes a
    slice of windows at a time and queues the files it did not reach as a job of their own."""
    from engram.families.workspace import INDEX_JOB, files
    from engram.kernel.queue import HAND_OVER

    e, (alice, _) = both, callers(both)
    counting = CountingEmbedder()
    e.workspace.embedder = counting
    text = "".join(f"def f{i}():\n    return {i}\n" for i in range(300))  # 600 lines: 10 windows, past the sync
    for name in ("a.py", "b.py", "c.py"):
        write(e, alice, f"lib/{name}", text)
    e.queue.join()
    ids = [e.workspace.file(alice, f"lib/{n}").id for n in ("a.py", "b.py", "c.py")]
    monkeypatch.setattr(files, "EMBED_SLICE", 10)  # a file a slice
    counting.texts = 0
    token = HAND_OVER.set(0.0)  # no time to spare: one slice, then the rest handed over
    try:
        e.workspace.index_jobs([{"context_id": "acme", "ids": ids}])  # type: ignore[attr-defined]
    finally:
        HAND_OVER.reset(token)
    assert counting.texts == 10  # the first file's windows
    [job] = [j for j in e.queue.pending() if j.data["name"] == INDEX_JOB]  # type: ignore[attr-defined]
    assert job.data["payload"]["ids"] == ids[1:]
    e.queue.join()
    assert counting.texts == 30  # the rest, by the job it queued
