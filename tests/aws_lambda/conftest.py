"""A deployed stack, on this machine: every function of template.yaml, imported from functions/*/app.py
with the environment the template gives it, over moto (DynamoDB, S3, SQS) and a real OpenSearch node,
behind the template's routes and authorizer (tests/aws_lambda/apigw.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import boto3
import pytest

from engram.adapters.aws.dynamodb_records import DynamoRecordStore
from engram.api.lambda_runtime import gateway_handler, instrument
from engram.settings import Settings
from engram.wiring import Engram, build
from tests.aws_lambda.apigw import ROOT, ApiGateway, Handler, invoke
from tests.conftest import Keys, make_keys

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
    """functions/<name>/app.py, imported as the Lambda runtime would (a fresh module per stack)."""
    spec = importlib.util.spec_from_file_location(
        f"fn_{name}_{uuid.uuid4().hex[:6]}", ROOT / "functions" / name / "app.py"
    )
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
def deployed_stack(endpoint: str, opensearch: str) -> Iterator[Stack]:
    """Fresh resources (table, bucket, queue, index) and every function loaded over them."""
    name = f"engram-{uuid.uuid4().hex[:8]}"
    functions = {family: f"{name}-{family}" for family in FAMILIES}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", endpoint)
        DynamoRecordStore.create_table(boto3.client("dynamodb", region_name="us-east-1"), name)
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=name)
        queue_url = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName=name)["QueueUrl"]
        for key, value in {  # what template.yaml's Globals give every function
            "ENGRAM_BACKEND": "aws",
            "ENGRAM_TABLE": name,
            "ENGRAM_BUCKET": name,
            "ENGRAM_QUEUE_URL": queue_url,
            "ENGRAM_OPENSEARCH_URL": opensearch,
            "ENGRAM_OPENSEARCH_SERVICE": "none",
            "ENGRAM_OPENSEARCH_INDEX": name,
            "ENGRAM_DNS_REBINDING_PROTECTION": "false",
            "ENGRAM_MAX_REQUEST_BYTES": "6000000",
            "ENGRAM_FAMILY_FUNCTIONS": json.dumps(functions),
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_NAMESPACE": "Engram",
        }.items():
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


@pytest.fixture(scope="module")
def stack(endpoint: str, opensearch: str) -> Iterator[Stack]:
    with deployed_stack(endpoint, opensearch) as found:
        yield found
