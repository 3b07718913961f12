"""End to end: `engram keys create` and `engram serve` as processes, a real MCP client over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram.cli.devserver import cli, serve
from tests.functional.mcpclient import connect

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    data = tmp_path_factory.mktemp("e2e")
    out = cli("keys", "create", "--context", "acme-prod", "--principal", "agent", "--grant", "org/acme", data_dir=data)
    key = out.strip().splitlines()[-1]
    assert key.startswith("sk-")
    assert key not in Path(data, "records.db").read_bytes().decode("latin-1")  # only a hash is stored
    cli("scopes", "create", "--context", "acme-prod", "org/acme/user/alice", data_dir=data)
    with serve(data) as url:
        yield url, key


async def test_store_then_recall_through_a_served_process(served: tuple[str, str]) -> None:
    url, key = served
    async with connect(url, key) as c:
        stored = await c.call_tool(
            "memory_store", {"content": "I just got promoted to CTO.", "scopes": [["org/acme/user/alice"]]}
        )
        assert stored.structured_content is not None
        assert stored.structured_content["attributes"][0]["value"] == "CTO"
        got = await c.call_tool("memory_recall", {"query": "What does Alice do at Acme?"})
        assert got.structured_content is not None and "CTO" in got.structured_content["context"]
        assert isinstance(got.structured_content["queryMs"], float)


async def test_upload_a_pdf_and_get_a_cited_passage(served: tuple[str, str]) -> None:
    import asyncio
    import base64

    from tests.fixtures.files import RETURNS_PDF, make_pdf

    url, key = served
    async with connect(url, key) as c:
        up = await c.call_tool(
            "document_upload",
            {
                "bytes_base64": base64.b64encode(make_pdf(RETURNS_PDF)).decode(),
                "title": "Returns Policy",
                "filename": "returns.pdf",
            },
        )
        assert up.structured_content is not None and up.structured_content["status"] == "queued"
        doc_id = up.structured_content["id"]
        for _ in range(100):
            got = await c.call_tool("document_get", {"id": doc_id})
            assert got.structured_content is not None
            if got.structured_content["status"] == "indexed":
                break
            await asyncio.sleep(0.1)
        assert got.structured_content["status"] == "indexed"
        ans = await c.call_tool("rag_ask", {"question": "What is the return window for unopened items?"})
        assert ans.structured_content is not None
        assert "30 days" in ans.structured_content["answer"]
        cite = ans.structured_content["citations"][0]
        assert cite["document_id"] == doc_id and cite["title"] == "Returns Policy" and cite["page"] == 2


@pytest.mark.parametrize(
    ("given", "setting", "expected"),
    [
        (None, None, "glibc.malloc.hugetlb=1"),
        ("glibc.malloc.arena_max=2", None, "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),  # kept
        (None, "0", None),  # ENGRAM_HUGE_PAGES=0: started as it was
    ],
)
def test_the_server_starts_again_with_huge_pages_for_its_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None, setting: str | None, expected: str | None
) -> None:
    """`engram serve` on Linux replaces itself (same process id) with a start whose malloc asks for transparent
    huge pages; a user's own tunables are kept; the setting turns it off. The process answers either way."""
    import httpx

    from engram.cli.devserver import start, stop

    for name, value in (("GLIBC_TUNABLES", given), ("ENGRAM_HUGE_PAGES", setting)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    proc, url = start(tmp_path)
    try:
        assert httpx.get(url + "/healthz").status_code == 200
        # what the process was started with (glibc's loader splits GLIBC_TUNABLES at ':' in place as it reads it)
        raw = Path(f"/proc/{proc.pid}/environ").read_bytes().replace(b"\0", b":").decode()
        assert ("glibc.malloc.hugetlb=1" in raw) == (expected is not None)
        assert given is None or f"GLIBC_TUNABLES={given}" in raw
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0")
        assert cmdline[1:4] == ["-m", "engram.cli", "serve"]  # the same command, started once more
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
        if expected and thp.exists() and "[never]" not in thp.read_text():
            rollup = Path(f"/proc/{proc.pid}/smaps_rollup").read_text()
            huge = next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("AnonHugePages"))
            assert huge > 0  # kB on huge pages (the model's weights among them)
    finally:
        stop(proc)


def test_a_long_url_that_arrives_in_pieces_is_answered_by_the_served_app(served: tuple[str, str]) -> None:
    """`engram serve` gives its HTTP parser the same room for a request head as the tests' servers."""
    import json

    from tests.functional.test_edge import long_url_in_pieces

    url, key = served
    status, body = long_url_in_pieces(url, key)
    assert status == 400, body[:200]
    assert json.loads(body)["error"]["code"] == "invalid_input"


async def test_two_tenants_at_once_every_call_answered_and_every_write_kept(tmp_path: Path) -> None:
    """#54: a noisy context's many concurrent k-100 recalls and stores beside a quiet context's recalls and stores, in
    one served process (the fair share's slots, a read giving way to the lighter context's calls, results encoded in
    their calls' slots): every call answers, without error, and every acknowledged store is recalled afterwards."""
    import asyncio

    keys = {}
    for ctx in ("noisy", "quiet"):
        out = cli(
            "keys", "create", "--context", ctx, "--principal", "agent", "--grant", f"org/{ctx}", data_dir=tmp_path
        )
        keys[ctx] = out.strip().splitlines()[-1]
    stored: dict[str, list[str]] = {"noisy": [], "quiet": []}
    answered = {"noisy": 0, "quiet": 0}
    with serve(tmp_path) as url:

        async def tenant(ctx: str, worker: int, rounds: int, k: int) -> None:
            async with connect(url, keys[ctx]) as c:
                for i in range(rounds):
                    word = f"marker{ctx}{worker}x{i}"
                    got = await c.call_tool("memory_store", {"content": f"Note {word}: the shipment left on time."})
                    assert not got.is_error, got
                    stored[ctx].append(word)
                    for _ in range(3):
                        got = await c.call_tool("memory_recall", {"query": "When did the shipment leave?", "k": k})
                        assert not got.is_error and got.structured_content is not None, got
                        answered[ctx] += 1

        await asyncio.gather(
            *(tenant("noisy", w, 4, 100) for w in range(8)), *(tenant("quiet", w, 4, 10) for w in range(2))
        )
        assert answered == {"noisy": 96, "quiet": 24}
        for ctx, words in stored.items():
            assert len(words) == {"noisy": 32, "quiet": 8}[ctx]
            async with connect(url, keys[ctx]) as c:
                for word in words:
                    got = await c.call_tool("memory_recall", {"query": f"Note {word}", "k": 5})
                    assert got.structured_content is not None
                    assert word in got.structured_content["context"], (ctx, word)
