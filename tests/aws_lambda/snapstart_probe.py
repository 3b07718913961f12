"""One function's SnapStart life in a fresh interpreter, as Lambda lives it: import functions/<name>/app.py
(init), run the before-snapshot hooks (publish), the after-restore hooks (a new execution environment),
then a first request and a second (warm) one. Prints JSON: milliseconds of each phase, the modules the first
request imported, the clients it made, and its answer's status.

`python tests/aws_lambda/snapstart_probe.py NAME AUTHORIZER_JSON` with the stack's environment set (AWS
endpoint, ENGRAM_* variables)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def main(name: str, authorizer: dict[str, str]) -> None:
    from snapshot_restore_py import get_after_restore, get_before_snapshot

    t0 = time.perf_counter()
    spec = importlib.util.spec_from_file_location(f"fn_{name}", ROOT / "functions" / name / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    t1 = time.perf_counter()
    for fn, args, kwargs in get_before_snapshot():
        fn(*args, **kwargs)
    t2 = time.perf_counter()
    snapshot_holds = credentials_held()
    for fn, args, kwargs in get_after_restore():
        fn(*args, **kwargs)
    t3 = time.perf_counter()
    from engram.wiring import CLIENTS_MADE, lazy_clients

    calls: list[str] = []
    for client in lazy_clients():  # every AWS API call the request makes, by operation name
        events = getattr(client.ready(), "meta", None)
        if events is not None:
            events.events.register("before-call.*.*", lambda model, **_: calls.append(model.name))
    modules, clients = set(sys.modules), CLIENTS_MADE["count"]
    answer = request(module.handler, name, authorizer)
    t4 = time.perf_counter()
    new_modules = sorted(set(sys.modules) - modules)
    made = CLIENTS_MADE["count"] - clients
    first_calls = list(calls)
    request(module.handler, name, authorizer)
    t5 = time.perf_counter()
    out = {
        "init_ms": (t1 - t0) * 1000,
        "before_snapshot_ms": (t2 - t1) * 1000,
        "after_restore_ms": (t3 - t2) * 1000,
        "first_request_ms": (t4 - t3) * 1000,
        "warm_request_ms": (t5 - t4) * 1000,
        "new_modules": new_modules,
        "clients_made": made,
        "credentials_in_snapshot": snapshot_holds,
        "api_calls": first_calls,  # the first request's AWS API calls
        "answer": answer,
    }
    print(json.dumps(out))


def credentials_held() -> list[str]:
    """What would carry credentials into the snapshot: clients with credentials, boto3's cached ones."""
    import boto3

    from engram.wiring import lazy_clients

    held = [
        c.service for c in lazy_clients() if getattr(getattr(c._client, "_request_signer", None), "_credentials", None)
    ]
    session = boto3.DEFAULT_SESSION
    if session is not None and session._session._credentials is not None:
        held.append("boto3 default session")
    return held


def request(handler: Any, name: str, authorizer: dict[str, str]) -> Any:
    from engram.api.snapstart import LambdaContext, api_event

    if name == "authorizer":
        event = {"headers": {"authorization": f"Bearer {authorizer['key']}"}, "requestContext": {}}
        return handler(event, LambdaContext())["isAuthorized"]
    if name == "worker":
        return handler({"engram": "recover"}, LambdaContext())
    from engram.api.snapstart import warm_call

    warm = warm_call(name)
    method, tool, args = ("tools/list", "", {}) if warm is None else ("tools/call", *warm)
    params: dict[str, Any] = {"name": tool, "arguments": args} if method == "tools/call" else {}
    path = "/mcp" if name == "gateway" else f"/mcp/{name}"
    event = api_event("POST", path, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, signed=False)
    event["requestContext"]["authorizer"] = {"lambda": authorizer["context"]}
    answer = handler(event, LambdaContext())
    body = json.loads(answer["body"])
    result = body.get("result") or {}
    return {"status": answer["statusCode"], "error": body.get("error"), "is_error": result.get("isError")}


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
