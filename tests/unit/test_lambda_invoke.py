"""The gateway's Lambda Invoke adapter against botocore's Stubber (the request it sends, what it returns)."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from engram.adapters.aws.lambda_invoke import FunctionFailed, LambdaInvoker


def _client_answering(payload: bytes, function_error: str | None = None) -> tuple[object, Stubber]:
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    answer = {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(payload), len(payload))}
    if function_error:
        answer["FunctionError"] = function_error
    event = {"rawPath": "/mcp/memory", "body": "{}"}
    stub.add_response(
        "invoke",
        answer,
        {"FunctionName": "engram-dev-memory", "InvocationType": "RequestResponse", "Payload": json.dumps(event)},
    )
    stub.activate()
    return client, stub


def test_invoke_returns_the_functions_http_response() -> None:
    client, stub = _client_answering(b'{"statusCode": 200, "body": "{}"}')
    assert LambdaInvoker(client)("engram-dev-memory", {"rawPath": "/mcp/memory", "body": "{}"}) == {
        "statusCode": 200,
        "body": "{}",
    }
    stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("payload", "error", "message"),
    [
        (b'{"errorMessage": "boom", "errorType": "RuntimeError"}', "Unhandled", "Unhandled"),
        (b"not json", None, "unreadable"),
        (b"[1, 2]", None, "not an HTTP response"),
    ],
)
def test_invoke_failures_are_reported(payload: bytes, error: str | None, message: str) -> None:
    client, _ = _client_answering(payload, error)
    with pytest.raises(FunctionFailed, match=message):
        LambdaInvoker(client)("engram-dev-memory", {"rawPath": "/mcp/memory", "body": "{}"})
