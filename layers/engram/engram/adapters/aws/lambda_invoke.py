"""Invoking a family function from the /mcp gateway function (AWS Lambda Invoke, request/response)."""

from __future__ import annotations

import json
from typing import Any


class FunctionFailed(Exception):
    """The invoked function raised (Lambda reports FunctionError) or answered something unreadable."""


class LambdaInvoker:
    def __init__(self, client: Any) -> None:
        self._lambda = client

    def __call__(self, function: str, event: dict[str, Any]) -> dict[str, Any]:
        """Run `function` on `event` and return what its handler returned."""
        answer = self._lambda.invoke(FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event))
        payload = answer["Payload"].read()
        if answer.get("FunctionError"):
            raise FunctionFailed(f"{function}: {answer['FunctionError']}: {payload[:500]!r}")
        try:
            result = json.loads(payload)
        except ValueError as exc:
            raise FunctionFailed(f"{function}: unreadable answer {payload[:200]!r}") from exc
        if not isinstance(result, dict):
            raise FunctionFailed(f"{function}: answered {type(result).__name__}, not an HTTP response")
        return result
