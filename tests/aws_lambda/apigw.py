"""API Gateway (HTTP API, payload v2) in front of the functions, as template.yaml declares it.

The routes come from the template's HttpApi events, so these tests also check the routing: a REST path
with no route answers 404 here as it would on AWS. Requests get API Gateway's v2 event (the shape of
tests/events/mcp_initialize.json), go through the template's Lambda authorizer (its simple response
becomes `requestContext.authorizer.lambda`), then to the function's handler.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "events"
Handler = Callable[[dict[str, Any], Any], Any]


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (!Ref, !Sub, ...) read as plain values."""


_CfnLoader.add_multi_constructor(
    "!",
    lambda loader, suffix, node: (
        loader.construct_scalar(node)
        if isinstance(node, yaml.ScalarNode)
        else loader.construct_sequence(node)
        if isinstance(node, yaml.SequenceNode)
        else loader.construct_mapping(node)
    ),
)


def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load((ROOT / "template.yaml").read_text(), Loader=_CfnLoader)
    return loaded


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    function: str
    authorized: bool

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method not in ("ANY", method):
            return None
        pattern = re.sub(r"\\\{(\w+)\\\+\\\}", r"(?P<\1>.+)", re.escape(self.path))  # greedy: {proxy+}
        pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", pattern) + "$"
        found = re.match(pattern, path)
        return found.groupdict() if found else None


def routes() -> list[Route]:
    out = []
    for name, resource in template()["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event in (resource["Properties"].get("Events") or {}).values():
            if event["Type"] != "HttpApi":
                continue
            props = event["Properties"]
            auth = (props.get("Auth") or {}).get("Authorizer")
            out.append(Route(props["Method"], props["Path"], name, auth != "NONE"))
    return out


@dataclass
class LambdaContext:
    """What the Lambda runtime passes as `context` (the fields Powertools reads)."""

    function_name: str
    memory_limit_in_mb: int = 1769
    aws_request_id: str = ""
    invoked_function_arn: str = ""
    remaining_ms: int = 29_000  # the time left of the function's limit when it is invoked

    def __post_init__(self) -> None:
        self.aws_request_id = self.aws_request_id or str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def event_for(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "mcp_initialize.json").read_text())
    path, _, query = path.partition("?")
    if query:  # as API Gateway (payload 2.0) sends a query string: raw, and parsed (repeats comma-joined)
        from urllib.parse import parse_qs

        event["rawQueryString"] = query
        event["queryStringParameters"] = {k: ",".join(v) for k, v in parse_qs(query).items()}
    event["rawPath"] = path
    event["requestContext"]["http"]["method"] = method
    event["requestContext"]["http"]["path"] = path
    event["requestContext"]["requestId"] = uuid.uuid4().hex[:16]
    event["headers"] = {
        "host": event["requestContext"]["domainName"],
        "x-amzn-trace-id": event["headers"]["x-amzn-trace-id"],
        **{k.lower(): v for k, v in headers.items()},
    }
    if body is None:
        event.pop("body", None)
    else:
        event["body"] = body.decode()
        event["headers"]["content-length"] = str(len(body))
    return event


LAMBDA_RESPONSE_BYTES = 6 * 1024 * 1024  # what a synchronous invocation may return


def invoke(handler: Handler, function: str, event: dict[str, Any], remaining_ms: int = 29_000) -> Any:
    """One invocation, as the Lambda runtime makes it: the event crosses as JSON, and the handler runs on
    a thread of its own with its own event loop (the function is another process on AWS; here the
    gateway invokes a family function from inside its own request)."""
    sent = json.loads(json.dumps(event))
    result: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            result["answer"] = handler(sent, LambdaContext(function, remaining_ms=remaining_ms))
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=f"lambda-{function}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    answer = json.dumps(result["answer"])
    if len(answer.encode()) > LAMBDA_RESPONSE_BYTES:  # Lambda fails the invocation; the caller sees an error
        raise LambdaError(f"{function}: Response payload size ({len(answer.encode())} bytes) exceeded maximum")
    return json.loads(answer)


class LambdaError(RuntimeError):
    """An invocation Lambda itself failed (API Gateway answers it with a 500 of its own)."""


class Environments:
    """A function as Lambda scales it: each execution environment takes one invocation at a time, and an
    invocation that finds none free gets a new one (`make` loads the function afresh), so concurrent
    invocations never share an environment's in-flight state."""

    def __init__(self, make: Callable[[], Handler]) -> None:
        self.make, self.free, self.lock = make, list[Handler](), threading.Lock()

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        with self.lock:
            handler = self.free.pop() if self.free else None
        handler = handler or self.make()
        try:
            return handler(event, context)
        finally:
            with self.lock:
                self.free.append(handler)


class ApiGateway:
    def __init__(self, functions: dict[str, Handler], authorizer: Handler) -> None:
        self.routes = routes()
        self.functions, self.authorizer = functions, authorizer

    def request(
        self, method: str, path: str, body: Any = None, key: str | None = None, headers: dict[str, str] | None = None
    ) -> Response:
        raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        sent = dict(headers or {})
        if key is not None:
            sent["authorization"] = f"Bearer {key}"
        if raw is not None:
            sent.setdefault("content-type", "application/json")
        event = event_for(method, path, raw, sent)
        for route in self.routes:
            params = route.match(method, path.partition("?")[0])
            if params is not None:
                break
        else:
            return Response(404, {}, b'{"message":"Not Found"}')
        event["routeKey"] = event["requestContext"]["routeKey"] = f"{route.method} {route.path}"
        if params:
            event["pathParameters"] = params
        if route.authorized:
            if "authorization" not in event["headers"]:  # identity source missing: API Gateway's own 401
                return Response(401, {}, b'{"message":"Unauthorized"}')
            request = copy.deepcopy(event)
            request.pop("body", None)
            request.update(type="REQUEST", identitySource=[event["headers"]["authorization"]])
            verdict = invoke(self.authorizer, "authorizer", request)
            if not verdict.get("isAuthorized"):
                return Response(403, {}, b'{"message":"Forbidden"}')
            event["requestContext"]["authorizer"] = {"lambda": verdict.get("context", {})}
        try:
            answer = invoke(self.functions[route.function], route.function, event)
        except LambdaError:
            return Response(500, {}, b'{"message":"Internal Server Error"}')  # API Gateway's, none of ours
        payload = answer.get("body") or ""
        data = base64.b64decode(payload) if answer.get("isBase64Encoded") else payload.encode()
        return Response(int(answer["statusCode"]), {k.lower(): v for k, v in answer.get("headers", {}).items()}, data)

    def asgi(self) -> Callable[..., Any]:
        """This gateway as an ASGI app: a real HTTP server (uvicorn) in front of it gives remote clients (the MCP
        SDK's) the API's URL, each request becoming API Gateway's event as above."""

        async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
                return
            body, more = b"", True
            while more:
                message = await receive()
                body, more = body + message.get("body", b""), message.get("more_body", False)
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            query = scope.get("query_string", b"").decode()
            path = scope["path"] + (f"?{query}" if query else "")
            answer = await asyncio.to_thread(self.request, scope["method"], path, body or None, None, headers)
            sent = [(k.encode(), v.encode()) for k, v in answer.headers.items() if k != "content-length"]
            await send({"type": "http.response.start", "status": answer.status, "headers": sent})
            await send({"type": "http.response.body", "body": answer.body})

        return app
