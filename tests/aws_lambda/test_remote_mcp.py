"""A remote MCP client (the SDK's) over real HTTP to the stack's functions (#51): uvicorn serves the API Gateway
emulator (`tests.aws_lambda.apigw`: the template's routes and authorizer, each request becoming API Gateway's
event), which runs the functions — on CPython 3.13 with the layers `sam build` made, when the Lambda tests run
there (`test_layers_on_python313`) — over the template's resources on LocalStack and moto. Every family answers,
through the gateway's `/mcp` and through its own `/mcp/{family}`."""

from __future__ import annotations

import pytest

from engram.api.snapstart import warm_call
from engram.cli.devserver import in_thread
from tests.aws_lambda.conftest import FAMILIES, Stack
from tests.functional.mcpclient import connect

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]


async def test_every_family_answers_a_remote_mcp_client_through_the_gateway(stack: Stack) -> None:
    with in_thread(stack.api.asgi()) as url:
        async with connect(url, stack.keys.agent) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert {"memory_store", "knowledge_search", "record_create", "read_code", "current_identity"} <= listed
            stored = await client.call_tool("memory_store", {"content": "I work at Initech in Lisbon."})
            assert not stored.is_error and stored.structured_content is not None
            assert {a["value"] for a in stored.structured_content["attributes"]} >= {"Initech"}
            for family in FAMILIES:
                found = warm_call(family)
                assert found is not None, family
                tool, arguments = found
                answer = await client.call_tool(tool, {k: v for k, v in arguments.items() if k != "__warmup__"})
                assert not answer.is_error, (family, tool, answer.structured_content)
                assert answer.structured_content is not None


async def test_a_family_answers_at_its_own_endpoint_and_refuses_a_missing_key(stack: Stack) -> None:
    with in_thread(stack.api.asgi()) as url:
        async with connect(url, stack.keys.agent, path="/mcp/memory") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "memory_recall" in names and "record_create" not in names  # the memory function's tools only
            got = await client.call_tool("memory_recall", {"query": "Where do I work?"})
            assert not got.is_error and got.structured_content is not None
        with pytest.raises(Exception):  # noqa: B017 - API Gateway's own 401, before any function runs
            async with connect(url, None, path="/mcp/memory") as anonymous:
                await anonymous.list_tools()
