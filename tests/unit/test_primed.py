"""A function starts a call's first reads as its event arrives (`engram.api.lambda_runtime.primed`)."""

from __future__ import annotations

import json
from typing import Any

from engram.api.lambda_runtime import primed


class Recorder:
    def __init__(self) -> None:
        self.primed: list[tuple[str, str]] = []

    def prime(self, context_id: str, key_id: str) -> None:
        self.primed.append((context_id, key_id))


def event(authorizer: dict[str, Any] | None) -> dict[str, Any]:
    return {"requestContext": {"authorizer": {"lambda": authorizer}} if authorizer is not None else {}}


def test_a_checked_key_of_one_context_is_primed_and_nothing_else() -> None:
    engram, answered = Recorder(), []
    handler = primed(engram, lambda e, c: answered.append(e) or {"statusCode": 200})  # type: ignore[arg-type]
    one = {"key_id": "key_1", "role": "agent", "contexts": json.dumps(["acme"]), "grant": json.dumps(["org/acme"])}
    two = dict(one, contexts=json.dumps(["acme", "globex"]))
    for given in (one, two, {"key_id": "", "refused": "invalid_token"}, None, dict(one, contexts="not json")):
        assert handler(event(given), None) == {"statusCode": 200}
    assert engram.primed == [("acme", "key_1")]  # one context: its reads; several: the call says which
    assert len(answered) == 5  # every event answered, a malformed authorizer context too
