"""Lambda SnapStart hooks (the official `snapshot-restore-py`): what a function can do once is done before
its snapshot, and what must differ per execution environment is done after each restore.

Before the snapshot (when a version is published): every module a request touches is imported and the
code paths warmed — the operation registry and the pydantic models of the function's operations (their
JSON schemas built), the MCP server and the HTTP stack (synthetic requests through the handler itself,
signed by a made-up authorizer context, that touch no store), the function's services, numpy and the
stemmer, the ONNX model with one embedding (its session warm), the parsers the family uses; the boto3 and
OpenSearch clients are made and used once; the boto3 clients are then kept with their connections closed and
their credentials taken out (their endpoint rules and request machinery stay warm), the OpenSearch client is
dropped, and boto3's session forgets the credentials it resolved: no connection and no credentials are in
the snapshot.

After a restore: random state is seeded again, per-process clocks (uptime, the call log) start again, the
environment's own credentials are resolved and given to the kept clients, and a dropped client the
function's requests use is made again, before the first request arrives — so a cold request imports
nothing and makes no client (tests/aws_lambda/test_snapstart.py checks both, and that the snapshot holds
no credentials).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from engram.api.auth import authorizer_context
from engram.kernel.caller import Principal

log = logging.getLogger("engram.snapstart")
Handler = Callable[[dict[str, Any], Any], Any]

# The clients of the functions that serve no family (a family's function: `Family.clients`), made after a
# restore (any other is made by no request of it: the SnapStart test fails if one is).
CLIENTS = {
    "authorizer": ("dynamodb",),
    "gateway": ("dynamodb", "lambda"),
    "worker": ("dynamodb", "opensearch", "sqs", "s3"),
}


def clients_of(name: str) -> tuple[str, ...] | None:
    from engram.families import NAMES, family

    return family(name).clients if name in NAMES else CLIENTS.get(name)


def warm_call(name: str) -> tuple[str, dict[str, Any]] | None:
    """A read the function's warm-up runs for real, in a context of its own that holds nothing: the whole
    request path (dispatch, the service, the store clients' request machinery, the answer's serialisation)
    runs once before the snapshot (`Family.warm`)."""
    from engram.families import NAMES, family

    return family(name).warm if name in NAMES else None


def build_services(name: str, engram: Any) -> None:
    """The services the function's requests use, built: its family's (the worker: those of every family's
    jobs)."""
    from engram.families import NAMES, all_families, family

    if name == "worker":  # reaching each job's handler builds its service
        for fam in all_families():
            for job in fam.jobs.values():
                engram.bound(fam, job.handler)
        return
    if name in NAMES:
        fam = family(name)
        for service in fam.service_names():
            getattr(engram.services(fam.services), service)


WARM = Principal("snapstart-warmup", "agent", ("snapstart-warmup",), ("org/snapstart-warmup",))
TIMINGS: dict[str, float] = {}  # name -> milliseconds of the last before-snapshot / after-restore (the bench)


def register(name: str, engram: Any, handler: Handler | None, warm: Callable[[], None] | None = None) -> None:
    """Register this function's hooks (outside Lambda's runtime nothing calls them; tests and the bench do);
    `warm`: more of the function's own to do before the snapshot."""
    try:
        from snapshot_restore_py import register_after_restore, register_before_snapshot
    except ImportError:  # not installed: a local run without the aws extra
        return
    register_before_snapshot(before_snapshot, name, engram, handler, warm)
    register_after_restore(after_restore, name, engram)


def api_event(method: str, path: str, body: dict[str, Any] | None, signed: bool) -> dict[str, Any]:
    raw = json.dumps(body) if body is not None else None
    context: dict[str, Any] = {
        "accountId": "000000000000", "apiId": "warmup", "domainName": "warmup.local", "domainPrefix": "warmup",
        "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "x"},
        "requestId": "snapstart-warmup", "routeKey": f"{method} {path}", "stage": "$default",
        "time": "01/Jan/2026:00:00:00 +0000", "timeEpoch": 1767225600000,
    }  # fmt: skip
    if signed:
        context["authorizer"] = {"lambda": authorizer_context(WARM)}
    headers = {"host": "warmup.local", "content-type": "application/json",
               "accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}  # fmt: skip
    event: dict[str, Any] = {"version": "2.0", "routeKey": f"{method} {path}", "rawPath": path, "rawQueryString": "",
                             "headers": headers, "requestContext": context, "isBase64Encoded": False}  # fmt: skip
    if raw is not None:
        event["body"] = raw
        headers["content-length"] = str(len(raw))
    return event


class LambdaContext:
    """What a handler reads of Lambda's context object."""

    function_name = "snapstart-warmup"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:snapstart-warmup"
    memory_limit_in_mb = 1769
    aws_request_id = "snapstart-warmup"
    log_group_name = "/aws/lambda/snapstart-warmup"
    log_stream_name = "warmup"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def _requests(name: str, handler: Handler) -> None:
    """The HTTP and MCP paths of a request, end to end, without touching a store: initialize, tools/list,
    a tools/call the arguments refuse, a REST route the arguments refuse, health."""
    from engram.families import select

    path = "/mcp" if name == "gateway" else f"/mcp/{name}"
    ops = select(family=None if name == "gateway" else name)
    rpc = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "w", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {}},
    ]  # fmt: skip
    if ops and name != "gateway":
        rpc.append({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": ops[0].name, "arguments": {"__warmup__": True}}})  # fmt: skip
    warm = warm_call(name)
    if warm is not None:
        tool, arguments = warm
        rpc.append(
            {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
        )
    for body in rpc:
        try:
            handler(api_event("POST", path, body, signed=True), LambdaContext())
        except Exception:  # best effort: a store not reachable while publishing leaves that path cold
            log.warning("snapstart warm-up %s of %s failed", body["method"], name, exc_info=True)
    handler(api_event("POST", path, rpc[1], signed=False), LambdaContext())  # no key: the 401 path
    if ops and name != "gateway":
        op = ops[0]
        rest = f"/api/v1/snapstart-warmup{op.path}".replace("{id}", "warmup")
        handler(api_event(op.method, rest, {"__warmup__": True}, signed=True), LambdaContext())
    handler(api_event("GET", "/healthz", None, signed=False), LambdaContext())


def before_snapshot(name: str, engram: Any, handler: Handler | None, warm: Callable[[], None] | None = None) -> None:
    started = time.perf_counter()
    import encodings.idna  # noqa: F401  (what a first HTTPS connection imports: the host name's codec)

    from engram.trust import jws

    jws.parser()  # PyJWT, imported on a function's first token otherwise
    if warm is not None:
        warm()

    if name != "authorizer":  # the authorizer reads a key; it has no operations
        from engram.families import select

        for op in select():  # every model's validator and schema built once
            op.input.model_json_schema()
            if op.output is not None:
                op.output.model_json_schema()
        import anyio.to_thread  # noqa: F401  (the thread a tool runs in)

    if engram is not None:
        build_services(name, engram)
        _warm_rules(name, engram)
    if handler is not None and name not in ("authorizer", "worker"):
        _requests(name, handler)
    from engram.wiring import forget_credentials, lazy_clients

    for client in lazy_clients():  # made and used once; then no connection and no credentials in them
        client.ready()
        client.suspend()
    forget_credentials()
    # everything built so far lives as long as the process: out of the collector's way, so a restored
    # environment's first collections do not walk it all again
    gc.collect()
    gc.freeze()
    TIMINGS[f"{name}.before_snapshot"] = (time.perf_counter() - started) * 1000


def _warm_rules(name: str, engram: Any) -> None:
    from engram.search import rules, terms  # noqa: F401 - the rules, imported before the snapshot

    terms.stem("warming")  # the stemmer
    import numpy

    numpy.zeros(1)
    if engram.embedder is not None and name not in ("gateway", "authorizer", "identity", "context"):
        engram.embedder.embed(["warm up the model"])  # the ONNX session and the tokenizer
    if name in ("memory", "worker") and engram.settings.extractor == "learned":
        from engram.families.entities import tagger

        tagger.shipped()  # the learned extractor's weights (memory's writes read with it)
    if name in ("records", "knowledge", "worker"):
        import jsonpatch  # noqa: F401

        from engram.families.records import schema_rules

        schema_rules.first_error(schema_rules.validator({"type": "object", "properties": {"a": {"pattern": "^a"}}}), {})
    if name in ("workspace", "worker", "knowledge"):
        from engram.families.workspace import code

        for path in ("a.py", "a.js", "a.ts", "a.tsx", "a.go", "a.rs", "a.java", "a.c", "a.cpp", "a.zig"):
            try:
                code.check(path, "")
            except ImportError:  # a function without the code layer (knowledge: searching needs no parser)
                break
        with contextlib.suppress(ImportError):
            import pycrdt  # noqa: F401


def after_restore(name: str, engram: Any) -> None:
    started = time.perf_counter()
    random.seed()  # not the snapshot's state: every restored environment draws its own
    from engram.kernel.observability import calls, metrics

    calls.started = time.time()
    calls.clear()
    metrics.drain()
    from engram.wiring import fresh_credentials, lazy_clients

    wanted = clients_of(name)
    clients = lazy_clients()
    credentials = fresh_credentials() if clients else None  # this environment's, resolved now
    for client in clients:
        client.resume(credentials, make=wanted is None or client.service in wanted)
    TIMINGS[f"{name}.after_restore"] = (time.perf_counter() - started) * 1000
