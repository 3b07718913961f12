"""End to end: `engram keys create` and `engram serve` as processes, a real MCP client over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engram.devserver import cli, serve
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
