"""AWS Lambda entry points. Each function under `functions/` is wiring: it picks one of these.

- `family_handler(family)`: `POST /mcp/{family}` and the family's REST routes (API Gateway HTTP API
  payload v2, through Mangum and the same ASGI app as the local server).
- `gateway_handler()`: `/mcp` with every tool; answers `initialize`, `tools/list`, `ping` itself and sends
  each `tools/call` to the family's function (Lambda Invoke of the same event, path `/mcp/{family}`).
- `authorizer_handler()`: the API Gateway Lambda authorizer (simple responses).
- `worker_handler()`: SQS batches of background jobs and S3 "Object Created" events.
- `instrument(service)`: Powertools logging (correlation id), tracing and metrics around any of them.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from engram.api import snapstart
from engram.api.auth import authorizer_context, bearer, principal_from_authorizer
from engram.kernel.errors import EngramError
from engram.kernel.queue import HAND_OVER
from engram.settings import Settings
from engram.trust.identity import IdentityService
from engram.wiring import Engram, Lazy, aws_client, build, build_identity

# The web stack (FastAPI, the MCP SDK, Mangum) is imported by the functions that serve HTTP only:
# the authorizer and the worker start without it.
if TYPE_CHECKING:
    from engram.api.app import Forward, Reply

log = logging.getLogger("engram.lambda")

Event = dict[str, Any]
Handler = Callable[[Event, Any], Any]
Invoke = Callable[[str, Event], Event]
"""(function name, event) -> what the function returned."""


def _mangum(engram: Engram, forward: Forward | None = None) -> Handler:
    from mangum import Mangum

    from engram.api.app import create_app

    # lifespan per invocation: the app makes fresh (cheap, stateless) MCP session managers each time
    return within_response_limit(Mangum(create_app(engram, forward), lifespan="auto"))


RESPONSE_BYTES = 6 * 1024 * 1024 - 16 * 1024  # what a synchronous invocation returns (6 MB), less room to spare


def within_response_limit(handler: Handler) -> Handler:
    """Lambda fails an invocation whose answer is over 6 MB, and API Gateway then answers a 500 with no body
    of Engram's. Such an answer becomes Engram's 413 `response_too_large` instead (over MCP, the tool's error
    result), naming what to ask for."""

    def handle(event: Event, context: Any) -> Any:
        answer = handler(event, context)
        body = answer.get("body") if isinstance(answer, dict) else None
        if not isinstance(body, str) or len(body) < RESPONSE_BYTES // 2:
            return answer
        size = len(json.dumps(answer).encode())
        return answer if size <= RESPONSE_BYTES else _too_large(event, answer, size)

    return handle


def _too_large(event: Event, answer: Event, size: int) -> Event:
    from engram.api.errors import error_body
    from engram.kernel.errors import PayloadTooLarge

    exc = PayloadTooLarge(
        f"the answer is {size} bytes, over the {RESPONSE_BYTES} a function returns on AWS: ask for less (a "
        "smaller limit or k, a page at a time, or without the text)",
        code="response_too_large",
    )
    body, status = error_body(exc), exc.status
    if str(event.get("rawPath", "")).startswith("/mcp"):  # the tool's error result, in its JSON-RPC answer
        raw = event.get("body") or ""
        try:
            request = json.loads(base64.b64decode(raw) if event.get("isBase64Encoded") else raw)
        except (ValueError, RecursionError):
            request = {}
        result = {"content": [{"type": "text", "text": json.dumps(body)}], "structuredContent": body, "isError": True}
        body, status = {"jsonrpc": "2.0", "id": request.get("id") if isinstance(request, dict) else None,
                        "result": result}, 200  # fmt: skip
    payload = json.dumps(body)
    headers = {k: v for k, v in (answer.get("headers") or {}).items() if k.lower() not in ("content-length",)}
    headers["content-type"] = "application/json"
    return {"statusCode": status, "headers": headers, "body": payload, "isBase64Encoded": False}


def primed(engram: Engram, handler: Handler) -> Handler:
    """As an event arrives whose key the authorizer checked and which holds one context, the reads its call will
    make are started (`Engram.prime`): on a cold instance they overlap with the request's parsing."""

    def handle(event: Event, context: Any) -> Any:
        given = ((event.get("requestContext") or {}).get("authorizer") or {}).get("lambda") or {}
        if given.get("key_id"):
            try:
                principal = principal_from_authorizer(given)
            except (EngramError, ValueError, KeyError, TypeError):  # the call itself answers what is wrong
                principal = None
            if principal is not None and len(principal.contexts) == 1:
                engram.prime(principal.contexts[0], principal.key_id)
        return handler(event, context)

    return handle


def family_handler(family: str, engram: Engram | None = None) -> Handler:
    """The function of one tool family: its MCP endpoint and its REST routes, nothing else."""
    if engram is None:
        engram = build(Settings(mcp_tools=family))
    handler = primed(engram, _mangum(engram))
    snapstart.register(family, engram, handler)
    return handler


def gateway_handler(engram: Engram | None = None, invoke: Invoke | None = None) -> Handler:
    """The `/mcp` function: every tool listed, each call run by the function of its family."""
    if engram is None:
        engram = build(Settings(embedder="none"))  # it lists tools; it never runs one
    if invoke is None:
        from engram.adapters.aws.lambda_invoke import LambdaInvoker

        settings = engram.settings
        invoke = LambdaInvoker(Lazy(lambda: aws_client("lambda", settings), "lambda"))
    handler = _mangum(engram, lambda_forward(invoke, engram.settings.family_functions))
    snapstart.register("gateway", engram, handler)
    return handler


def _jsonrpc_error(body: bytes, code: int, message: str) -> Reply:
    try:
        request_id = json.loads(body).get("id")
    except (ValueError, AttributeError, RecursionError):
        request_id = None
    payload = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return 200, [(b"content-type", b"application/json")], json.dumps(payload).encode()


def lambda_forward(invoke: Invoke, functions: Mapping[str, str]) -> Forward:
    """Forward: the gateway's own API Gateway event, re-aimed at `/mcp/{family}`, to the family function."""

    import anyio.to_thread

    async def forward(family: str, scope: Mapping[str, Any], body: bytes) -> Reply:
        event = scope.get("aws.event")
        function = functions.get(family)
        if not isinstance(event, dict) or function is None:
            log.error("no function for the %s family (ENGRAM_FAMILY_FUNCTIONS)", family)
            return _jsonrpc_error(body, -32603, f"the {family} tools are not deployed behind this gateway")
        path = f"/mcp/{family}"
        context = dict(event.get("requestContext", {}))
        context["http"] = dict(context.get("http", {}), path=path)
        sub = dict(event, rawPath=path, routeKey=f"POST {path}", body=body.decode(), isBase64Encoded=False)
        sub["requestContext"] = context
        try:
            answer = await anyio.to_thread.run_sync(invoke, function, sub)
        except Exception:
            log.exception("invoking %s for the %s family failed", function, family)
            return _jsonrpc_error(body, -32603, f"the {family} function failed; see its logs")
        raw = answer.get("body") or ""
        payload = base64.b64decode(raw) if answer.get("isBase64Encoded") else raw.encode()
        headers = [(k.lower().encode(), str(v).encode()) for k, v in (answer.get("headers") or {}).items()]
        headers = [h for h in headers if h[0] != b"content-length"] + [(b"content-length", str(len(payload)).encode())]
        return int(answer.get("statusCode", 200)), headers, payload

    return forward


def authorizer_handler(identity: IdentityService | None = None) -> Handler:
    """API Gateway (HTTP API, payload v2, simple responses) authorizer.

    It resolves the bearer key or OAuth access token once (API Gateway caches the answer per Authorization
    header, `AuthorizerCacheSeconds`) and always
    lets the request through: with no valid key the context says so (`key_id` empty) and the function
    answers 401 in the MCP/REST error shape, which API Gateway's own 401/403 bodies would not have.
    """
    found = identity if identity is not None else build_identity(Settings())
    # the trusted issuers' keys, fetched before the SnapStart snapshot, so they are in it (their expiry is
    # checked against the wall clock after a restore, and they are fetched again once expired); without
    # SnapStart, by the first token, not at init (a cold start of a key's call does not wait for them)
    snapstart.register("authorizer", None, None, warm=found.warm_tokens)

    def authorize(event: Event, context: Any) -> Event:
        headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
        refused = ""
        try:
            principal = found.authenticate(bearer(headers))
        except EngramError as exc:  # not valid; or an issuer's keys unreachable: the function answers 401
            principal, refused = None, exc.code
        return {"isAuthorized": True, "context": authorizer_context(principal, refused)}

    return authorize


RECOVER_AFTER = timedelta(minutes=5)  # older job records are sent again (a duplicate run is harmless)
FINISH_MARGIN = 30.0  # seconds of the worker's time limit (90) a long job keeps for saving and handing over


def worker_handler(engram: Engram | None = None) -> Handler:
    """SQS batches (background jobs, S3 events via EventBridge) with partial batch failures."""
    from engram.adapters.aws.sqs_queue import SqsQueue

    found = engram if engram is not None else build(Settings())
    queue = found.queue
    if not isinstance(queue, SqsQueue):
        raise RuntimeError("the worker needs ENGRAM_QUEUE_URL (an SQS queue)")
    snapstart.register("worker", found, None)

    def work(event: Event, context: Any) -> Event:
        if event.get("engram") == "recover":  # the schedule: jobs committed whose message never went
            return {"recovered": queue.recover(RECOVER_AFTER)}
        left = context.get_remaining_time_in_millis() / 1000 if context is not None else None
        # a long job (an erasure, a large embedding) hands its rest over to a job of its own while there is time to save
        token = HAND_OVER.set(None if left is None else time.monotonic() + left - FINISH_MARGIN)
        try:
            failed = queue.handle_batch(event.get("Records", []))
        finally:
            HAND_OVER.reset(token)
        return {"batchItemFailures": [{"itemIdentifier": m} for m in failed]}

    return work


def publish_calls(calls: list[tuple[str, str, float, bool, int]]) -> None:
    """Each tool call as CloudWatch embedded metrics (Powertools), one dimension set per family and tool:
    Calls, Errors, Latency (ms), Embeddings."""
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    for family, tool, ms, ok, embeddings in calls:
        one = EphemeralMetrics(namespace="Engram")  # its own metric set (Metrics share one per process)
        one.add_dimension(name="family", value=family)
        one.add_dimension(name="tool", value=tool)
        one.add_metric(name="Calls", unit=MetricUnit.Count, value=1)
        one.add_metric(name="Errors", unit=MetricUnit.Count, value=0 if ok else 1)
        one.add_metric(name="Latency", unit=MetricUnit.Milliseconds, value=round(ms, 2))
        one.add_metric(name="Embeddings", unit=MetricUnit.Count, value=embeddings)
        one.flush_metrics()


def instrument(service: str, handler: Handler, http: bool = True, tracing: bool = True) -> Handler:
    """Powertools around a handler: structured logs with the request's correlation id, X-Ray tracing (not
    for the authorizer: `tracing=False` keeps the X-Ray SDK out of the function every request waits for),
    CloudWatch metrics (EMF). Outside Lambda, tracing is off (POWERTOOLS_TRACE_DISABLED)."""
    from aws_lambda_powertools import Logger, Metrics, single_metric
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.metrics import MetricUnit

    from engram.kernel.observability import metrics as counters

    logger = Logger(service=service)
    metrics = Metrics(namespace="Engram", service=service)
    path = correlation_paths.API_GATEWAY_HTTP if http else None

    counters.keep_calls = True  # each call's figures, published below

    def handle(event: Event, context: Any) -> Any:
        metrics.add_metric(name="Invocations", unit=MetricUnit.Count, value=1)
        try:
            return handler(event, context)
        finally:
            for name, dims, value in counters.drain():  # Engram's own counters (authz.denied, ...)
                with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace="Engram") as one:
                    one.add_dimension(name="service", value=service)
                    for k, v in dims.items():
                        one.add_dimension(name=k, value=v or "-")
            publish_calls(counters.drain_calls())

    traced: Handler = handle
    if tracing:
        from aws_lambda_powertools import Tracer

        traced = Tracer(service=service).capture_lambda_handler(handle)
    logged: Handler = logger.inject_lambda_context(correlation_id_path=path, clear_state=True)(
        metrics.log_metrics(capture_cold_start_metric=True)(traced)
    )
    return logged
