"""Issue #22's fuzzer through the Lambda path: every tool's arguments from its own input schema with hostile
values mixed in (tests/fixtures/hostile.py), sent over MCP and REST as API Gateway v2 events through the
template's routes, the authorizer and the family functions, over the AWS adapters (DynamoDB, S3 and SQS on moto,
a real OpenSearch node): what the embedded stores of `engram serve` never see, such as DynamoDB's limits on keys,
items and numbers, or a query OpenSearch parses.

No answer is a 5xx, a JSON-RPC -32603 or an error whose status is 5xx; nothing the fuzzer sends reaches a
loopback listener; and the worker then runs every job the fuzzing queued without a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given

from engram.families import select
from engram.kernel.operation import AnyOperation as Operation
from tests.aws_lambda.conftest import Stack
from tests.fixtures.hostile import MCP_HEADERS, arguments, judge_mcp, judge_rest, mcp_call, rest_call, seeded
from tests.fixtures.listener import loopback_listener

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]

FUZZ_EXAMPLES = int(os.environ.get("ENGRAM_LAMBDA_FUZZ_EXAMPLES", "4"))  # a tool, each way
OPS = select()


class Fuzzing:
    def __init__(self, key: str, listener: str, reached: list[str]) -> None:
        self.key, self.listener, self.reached = key, listener, reached
        self.outcomes: dict[str, int] = {}


@pytest.fixture(scope="module")
def fuzzing(stack: Stack) -> Iterator[Fuzzing]:
    key, _ = stack.engram.identity.create_key(["acme"], "management", ["org/acme/user/fuzz"])
    with loopback_listener() as (listener, reached):
        yield Fuzzing(key, listener, reached)


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_fuzz_every_tool_through_the_functions(stack: Stack, fuzzing: Fuzzing, op: Operation) -> None:
    @seeded(FUZZ_EXAMPLES)
    @given(args=arguments(op, fuzzing.listener))
    def fuzz(args: Any) -> None:
        answer = stack.api.request("POST", "/mcp", mcp_call(op.name, args), fuzzing.key, MCP_HEADERS)
        outcome = judge_mcp(answer.status, answer.body.decode(), op.name, args)
        fuzzing.outcomes[outcome] = fuzzing.outcomes.get(outcome, 0) + 1
        method, path, body = rest_call(op, args)
        answer = stack.api.request(method, path, body, fuzzing.key)
        judge_rest(answer.status, answer.body.decode(), op, args)

    fuzz()
    assert fuzzing.reached == [], f"{op.name} made a function reach out: {fuzzing.reached}"


def test_zz_the_worker_runs_every_job_the_fuzzing_queued(stack: Stack, fuzzing: Fuzzing) -> None:
    """Runs last in this module: what the fuzzed writes queued (embeddings, graph jobs) runs without a failure,
    and the fuzzing reached past validation into the services."""
    answers = stack.drain()
    assert answers, "the fuzzing queued no job"
    assert [a["batchItemFailures"] for a in answers if a["batchItemFailures"]] == []
    assert fuzzing.reached == []
    print(f"fuzz outcomes through the functions: {fuzzing.outcomes}")
    floor = len(OPS) * FUZZ_EXAMPLES // 10  # answered: over a tenth of the MCP calls (at 4 a tool, 23 % were)
    assert fuzzing.outcomes.get("answered", 0) > floor and fuzzing.outcomes.get("failed", 0) > 0
