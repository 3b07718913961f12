"""#53: a whole context exported and imported (`engram.transfer.archive`), with the real model — local -> the AWS
adapters -> local gives back every object (versions, actors, times), every blob and every index document with its
vector; an import with the same model embeds nothing, with another the index is made again; importing twice changes
nothing; a stopped import resumes; an incomplete or foreign file is refused."""

from __future__ import annotations

import base64
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

from engram.cli.main import main
from engram.kernel.errors import InvalidInput
from engram.settings import Settings
from engram.transfer.archive import export, import_file, read_lines
from engram.wiring import Engram, build_local, default_embedder
from tests.contract.conftest import aws_engram_on
from tests.contract.test_reindex import fill, same, snapshot


def dump(e: Engram, path: Path, audit: bool = False) -> dict[str, Any]:
    """The context's export written to `path`, read back: objects, blobs and docs by key."""
    with path.open("wb") as f:
        export(e, "acme", f, audit=audit)
    with path.open("rb") as f:
        got: dict[str, Any] = {"object": {}, "blob": {}, "doc": {}, "audit": [], "end": None}
        for line in read_lines(f):
            t = line["t"]
            if t == "object":
                got[t][line["kind"], line["id"]] = line
            elif t in ("blob", "doc"):
                got[t][line.get("kind", ""), line.get("id", line.get("key"))] = line
            elif t == "audit":
                got[t].append(line)
            elif t == "end":
                got[t] = line
    return got


def vectors_equal(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    """The same index documents, their vectors equal to the bit."""

    def plain(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k != "vector"}

    def vector(s: str | None) -> bytes | None:
        return None if s is None else base64.b64decode(s)

    return a.keys() == b.keys() and all(
        plain(a[k]) == plain(b[k]) and vector(a[k]["vector"]) == vector(b[k]["vector"]) for k in a
    )


class Counting:
    """An embedder that counts the texts it is asked to embed (an import with the same model asks for none)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.model_id, self.dim, self.texts = inner, inner.model_id, inner.dim, 0

    def embed(self, texts: Any) -> Any:
        self.texts += len(texts)
        return self.inner.embed(texts)


def test_import_twice_changes_nothing_and_a_stopped_import_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False))
    fill(source)
    source.audit.record("acme", key_id="key-1", principal="org/acme/user/alice", tool="memory_store", transport="mcp",
                        objects_=["turn:1"], outcome="ok")  # fmt: skip
    first = dump(source, tmp_path / "a.jsonl.gz", audit=True)
    kinds = {k for k, _ in first["object"]}
    assert {"turn", "attribute", "entity", "relation", "document", "record", "schema", "wfile", "scope"} <= kinds
    assert first["blob"] and first["doc"] and first["audit"]
    assert any(len(o["versions"]) > 1 for o in first["object"].values())  # histories come whole
    assert first["end"]["objects"] == len(first["object"])

    counting = Counting(default_embedder(Settings()))
    target = build_local(Settings(data_dir=tmp_path / "b", queue_worker=False), embedder=counting)  # type: ignore[arg-type]
    monkeypatch.setattr("engram.transfer.archive.BATCH", 7)
    real, calls = target.records.restore, {"n": 0}

    def dies(ctx: str, objects: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # stopped half way
        return real(ctx, objects)

    monkeypatch.setattr(target.records, "restore", dies)
    with pytest.raises(KeyboardInterrupt):
        import_file(target, tmp_path / "a.jsonl.gz")
    state = tmp_path / "a.jsonl.gz.state"
    assert json.loads(state.read_text())["line"] > 0
    monkeypatch.setattr(target.records, "restore", real)
    resumed = import_file(target, tmp_path / "a.jsonl.gz")
    assert not state.exists()
    assert resumed.written == len(first["object"]) - 14  # two batches of 7 were in before it stopped
    assert counting.texts == 0  # the same model: vectors taken as they are, nothing embedded
    again = dump(target, tmp_path / "b.jsonl.gz")
    assert again["object"] == first["object"] and again["blob"] == first["blob"]
    assert vectors_equal(again["doc"], first["doc"])
    assert snapshot(target) == snapshot(source)  # the same searches, to the score

    twice = import_file(target, tmp_path / "a.jsonl.gz")
    assert twice.written == 0
    assert dump(target, tmp_path / "c.jsonl.gz")["object"] == first["object"]
    imports = target.audit.query("acme", None, None, None, None, "context_import", None, None, 10)["entries"]
    assert len(imports) == 2


def test_another_model_makes_the_index_again(tmp_path: Path) -> None:
    source = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False))
    fill(source)
    dump(source, tmp_path / "a.jsonl.gz")
    target = build_local(Settings(data_dir=tmp_path / "b", queue_worker=False, embedder="none"))
    done = import_file(target, tmp_path / "a.jsonl.gz")
    assert done.reindexed
    lexical = {k: [i for i, _ in v] for k, v in snapshot(source).items() if k[1] == "bm25"}
    assert {k: [i for i, _ in v] for k, v in snapshot(target).items() if k[1] == "bm25"}.keys() == lexical.keys()
    assert all(set(ids) == set(lexical[k]) for k, ids in ((k, [i for i, _ in v]) for k, v in snapshot(target).items()
                                                          if k[1] == "bm25"))  # fmt: skip


def test_an_incomplete_or_foreign_file_is_refused(tmp_path: Path) -> None:
    source = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False, embedder="none"))
    fill(source)
    whole = tmp_path / "a.jsonl.gz"
    dump(source, whole)
    lines = gzip.decompress(whole.read_bytes()).splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(b"".join(lines[: len(lines) // 2])))
    target = build_local(Settings(data_dir=tmp_path / "b", queue_worker=False, embedder="none"))
    with pytest.raises(InvalidInput, match="incomplete"):
        import_file(target, cut)
    foreign = tmp_path / "memory.jsonl.gz"
    foreign.write_bytes(gzip.compress(b'{"type": "entity", "name": "x"}\n'))
    with pytest.raises(InvalidInput, match="not an Engram export"):
        import_file(target, foreign)
    newer = tmp_path / "v9.jsonl.gz"
    header = json.loads(lines[0]) | {"version": 9}
    newer.write_bytes(gzip.compress(json.dumps(header).encode() + b"\n" + b"".join(lines[1:])))
    with pytest.raises(InvalidInput, match="version 9"):
        import_file(target, newer)
    with pytest.raises(Exception):  # noqa: B017  # not gzip at all
        import_file(target, _write(tmp_path / "plain.gz", b"hello"))


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_the_commands_export_and_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False, embedder="none"))
    fill(source)
    out = tmp_path / "acme.jsonl.gz"
    assert main(["export", "--context", "acme", "--data-dir", str(tmp_path / "a"), "--out", str(out)]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["objects"] > 20 and out.exists() and not out.with_name(out.name + ".partial").exists()
    assert main(["import", str(out), "--data-dir", str(tmp_path / "b")]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["written"] == said["objects"]
    target = build_local(Settings(data_dir=tmp_path / "b", queue_worker=False, embedder="none"))
    assert dump(target, tmp_path / "b.jsonl.gz")["object"] == dump(source, tmp_path / "c.jsonl.gz")["object"]


@pytest.mark.aws
@pytest.mark.opensearch
def test_local_to_aws_and_back_gives_every_object_back(tmp_path: Path, aws: Any, opensearch: str) -> None:
    local = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False))
    fill(local)
    first = dump(local, tmp_path / "a.jsonl.gz")
    mp = pytest.MonkeyPatch()
    try:
        remote = aws_engram_on(aws, opensearch, mp, tmp_path / "aws")
        remote.index.ensure()
        import_file(remote, tmp_path / "a.jsonl.gz")
        there = dump(remote, tmp_path / "b.jsonl.gz")
        assert there["object"] == first["object"] and there["blob"] == first["blob"]
        assert vectors_equal(there["doc"], first["doc"])
        assert same(remote, snapshot(remote), snapshot(local))
    finally:
        mp.undo()
    back = build_local(Settings(data_dir=tmp_path / "c", queue_worker=False))
    import_file(back, tmp_path / "b.jsonl.gz")
    home = dump(back, tmp_path / "c.jsonl.gz")
    assert home["object"] == first["object"] and home["blob"] == first["blob"]
    assert vectors_equal(home["doc"], first["doc"])
    assert snapshot(back) == snapshot(local)


def test_the_format_is_gzip_of_json_lines(tmp_path: Path) -> None:
    source = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False, embedder="none"))
    fill(source)
    buf = io.BytesIO()
    export(source, "acme", buf)
    lines = [json.loads(x) for x in gzip.decompress(buf.getvalue()).splitlines()]
    assert lines[0]["t"] == "header" and lines[0]["format"] == "engram-export" and lines[0]["version"] == 1
    assert lines[-1]["t"] == "end" and lines[0]["model"] is None
    assert {x["t"] for x in lines} == {"header", "object", "blob", "doc", "end"}


def test_many_importers_of_one_file_at_once_write_each_object_once(tmp_path: Path) -> None:
    import threading

    source = build_local(Settings(data_dir=tmp_path / "a", queue_worker=False, embedder="none"))
    fill(source)
    first = dump(source, tmp_path / "a.jsonl.gz")
    target = build_local(Settings(data_dir=tmp_path / "b", queue_worker=False, embedder="none"))
    written: list[int] = []
    errors: list[BaseException] = []

    def one(n: int) -> None:
        copy = tmp_path / f"copy{n}.jsonl.gz"  # each its own file (and checkpoint)
        copy.write_bytes((tmp_path / "a.jsonl.gz").read_bytes())
        try:
            written.append(import_file(target, copy).written)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sum(written) == len(first["object"])  # each object written by exactly one of them
    assert dump(target, tmp_path / "b.jsonl.gz")["object"] == first["object"]
