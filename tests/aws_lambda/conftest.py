"""A deployed stack, on this machine: every function of template.yaml, imported from functions/*/app.py
with the environment the template gives it, over the template's resources (DynamoDB on moto; S3 and SQS on
LocalStack: `tests.stack`) and a real OpenSearch node, behind the template's routes and authorizer
(tests/aws_lambda/apigw.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest

from engram.api.lambda_runtime import gateway_handler, instrument
from engram.settings import Settings
from engram.wiring import Engram, build
from tests import stack
from tests.aws_lambda.apigw import ROOT, ApiGateway, Handler, invoke
from tests.conftest import Aws, Keys, make_keys

FAMILIES = {
    "conversation": "ConversationFunction",
    "entities": "EntitiesFunction",
    "memory": "MemoryFunction",
    "knowledge": "KnowledgeFunction",
    "identity": "IdentityFunction",
    "context": "ContextFunction",
    "records": "RecordsFunction",
    "workspace": "WorkspaceFunction",
}


def load_function(name: str) -> ModuleType:
    """functions/<name>/app.py, imported as the Lambda runtime would (a fresh module per stack); from `sam
    build`'s artifact of the function when `BUILT_FUNCTIONS` names a build (`test_layers_on_python313`)."""
    built = os.environ.get("BUILT_FUNCTIONS")
    path = Path(built) / f"{name.capitalize()}Function" / "app.py" if built else ROOT / "functions" / name / "app.py"
    spec = importlib.util.spec_from_file_location(f"fn_{name}_{uuid.uuid4().hex[:6]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Stack:
    api: ApiGateway
    keys: Keys
    engram: Engram  # the same stores, for looking behind the API
    handlers: dict[str, Handler]
    names: dict[str, str]
    queue_url: str

    def drain(self, remaining_ms: int = 90_000) -> list[dict[str, Any]]:
        """Deliver what waits in the jobs queue to the worker, as the SQS event source would (each invocation
        with `remaining_ms` of its time limit left: the worker's is 90 s)."""
        sqs = boto3.client("sqs", region_name="us-east-1")
        answers = []
        while True:
            got = sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
            if not got:
                return answers
            records = [{"messageId": m["MessageId"], "body": m["Body"], "eventSource": "aws:sqs"} for m in got]
            answer = invoke(self.handlers["WorkerFunction"], "worker", {"Records": records}, remaining_ms)
            answers.append(answer)
            failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
            for m in got:
                if m["MessageId"] not in failed:
                    sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
            if failed:
                return answers


@contextlib.contextmanager
def deployed_stack(aws: Aws, opensearch: str) -> Iterator[Stack]:
    """Fresh resources as template.yaml defines them (a table on moto's DynamoDB, a bucket and a queue on
    LocalStack: `tests.stack`), an index of the test node, and every function loaded over them with the
    environment the template's Globals give it."""
    name = stack.table()
    stack.bucket(aws.stack, name)
    queue_url = stack.queue(aws.stack, name)
    functions = {family: f"{name}-{family}" for family in FAMILIES}
    given = {"Table": name, "DocumentsBucket": name, "JobsQueue": queue_url, "SearchDomain.DomainEndpoint": "-"}
    with pytest.MonkeyPatch.context() as env:
        here = {  # what this machine has instead of the template's
            "ENGRAM_OPENSEARCH_URL": opensearch,  # the test node, unsigned, its own index
            "ENGRAM_OPENSEARCH_SERVICE": "none",
            "ENGRAM_OPENSEARCH_INDEX": name,
            "ENGRAM_FAMILY_FUNCTIONS": json.dumps(functions),  # the template's, with the names here
            "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon
        }
        for key, value in (stack.function_environment(given) | here).items():
            env.setenv(key, value)
        handlers: dict[str, Handler] = {FAMILIES[family]: load_function(family).handler for family in FAMILIES} | {
            "AuthorizerFunction": load_function("authorizer").handler,
            "WorkerFunction": load_function("worker").handler,
        }
        by_name = {functions[family]: handlers[FAMILIES[family]] for family in FAMILIES}
        # The gateway as functions/gateway/app.py builds it, but Lambda Invoke runs the family function here.
        handlers["GatewayFunction"] = instrument(
            "gateway",
            gateway_handler(build(Settings(embedder="none")), lambda fn, event: invoke(by_name[fn], fn, event)),
        )
        engram = build(Settings())
        keys = make_keys(engram)
        api = ApiGateway(
            {k: v for k, v in handlers.items() if k != "AuthorizerFunction"}, handlers["AuthorizerFunction"]
        )
        yield Stack(api, keys, engram, handlers, functions, queue_url)


@pytest.fixture(scope="module", name="stack")
def the_stack(aws: Aws, opensearch: str) -> Iterator[Stack]:
    with deployed_stack(aws, opensearch) as found:
        yield found
