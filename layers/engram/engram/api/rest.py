"""REST surface: one route per operation under /api/v1/{context_id}, generated from the registry.

Arguments come from the JSON body (or the query string for GET and DELETE) plus the path; they are
validated against the operation's input model here, after the key is checked, so a caller without
a valid key learns nothing about the route's arguments.
"""

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from engram.api import dispatch
from engram.api.auth import metadata_url, principal_for
from engram.api.errors import rendered
from engram.api.schemas import schema
from engram.kernel.caller import Principal, check_context
from engram.kernel.errors import EngramError, InvalidInput, Unauthenticated
from engram.kernel.limits import scrub
from engram.kernel.metering import Cost, header
from engram.kernel.operation import AnyOperation, TextOutput
from engram.kernel.ports import no_progress
from engram.wiring import Engram

_BODYLESS = ("GET", "DELETE")


async def authenticate(engram: Engram, request: Request) -> Principal:
    return await anyio.to_thread.run_sync(principal_for, engram, request.scope)


class Reply(JSONResponse):
    """A JSON answer that always renders: should a stored value hold what JSON text cannot (a lone surrogate
    written before the edge refused them), it is answered with U+FFFD in its place, never with a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        except (UnicodeEncodeError, ValueError):
            return json.dumps(scrub(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def cost_headers(cost: Cost) -> dict[str, str]:
    """What a call cost, as REST headers: `X-Engram-Cost` (every figure) and `Server-Timing`."""
    return {"x-engram-cost": header(cost), "server-timing": f"engram;dur={cost.server_ms:.2f}"}


def error_response(exc: EngramError) -> Response:
    status, headers, payload = rendered(exc)
    return Response(payload, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


_SELECTORS = ("scopes", "lens")


def query_arguments(items: list[tuple[str, str]]) -> dict[str, Any]:
    """A GET's query string as arguments. A selector (`scopes`, `lens`) is JSON DNF text
    (`[["a","b"],["c"]]`), or plain paths: `?scopes=a` is [["a"]], and repeated, `?scopes=a&scopes=c`,
    they are alternatives: [["a"], ["c"]]."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for k, _ in items):
        values = [v for k, v in items if k == key]
        if key in _SELECTORS and not (len(values) == 1 and values[0].lstrip().startswith("[")):
            out[key] = [[v] for v in values]
        else:
            out[key] = values[0] if len(values) == 1 else values
    return out


async def _arguments(request: Request, method: str) -> dict[str, Any]:
    if method in _BODYLESS:
        return query_arguments(request.query_params.multi_items())
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not JSON: {exc.msg}") from None
    except (ValueError, RecursionError):  # an integer of over 4,300 digits; nesting too deep for the parser
        raise InvalidInput("request body is not JSON Engram takes: a number too long or nesting too deep") from None
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object")
    return body


def _endpoint(engram: Engram, op: AnyOperation) -> Callable[[Request], Awaitable[Any]]:
    async def endpoint(request: Request) -> Any:
        cost = Cost()
        try:
            path = dict(request.path_params)
            context_id = check_context(path.pop("context_id"))
            principal = await authenticate(engram, request)
            raw = await _arguments(request, op.method)
            if raw.get("context_id") not in (None, context_id):
                raise InvalidInput("context_id in the body differs from the one in the path")
            args = op.parse({**raw, **path, "context_id": context_id})
            result = await dispatch.run(engram, op, principal, args, no_progress, cost=cost)
        except EngramError as exc:
            if isinstance(exc, Unauthenticated) and exc.resource_metadata is None:  # the masked 401 of a context
                exc.resource_metadata = metadata_url(engram.settings.public_url, request.scope)
            failed = error_response(exc)
            failed.headers.update(cost_headers(cost))
            return failed
        return Reply({"text": result} if isinstance(result, str) else result, headers=cost_headers(cost))

    return endpoint


def inline_defs(node: Any, defs: dict[str, Any]) -> Any:
    """The schema with every `#/$defs/X` reference replaced by X itself: a request schema embedded in the
    OpenAPI document cannot point at `$defs` of its own (they would resolve against the document's root)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return inline_defs(defs[ref[len("#/$defs/") :]], defs) | inline_defs(rest, defs)
        return {k: inline_defs(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [inline_defs(v, defs) for v in node]
    return node


def _openapi(op: AnyOperation, route: str) -> dict[str, Any]:
    path = f"/{{context_id}}{route}"  # what the path carries is not asked for again in the body or query
    raw = schema(op.input)
    model = inline_defs(raw, raw.get("$defs", {}))
    properties = model.get("properties", {})
    params = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": properties.get(name, {"type": "string"}) if name != "context_id" else CONTEXT_SCHEMA,
        }
        for name in re.findall(r"{(\w+)}", path)
    ]
    if op.method in _BODYLESS:
        required = set(model.get("required", []))
        return {
            "parameters": params
            + [
                {"name": name, "in": "query", "required": name in required, "schema": prop}
                for name, prop in properties.items()
                if f"{{{name}}}" not in path
            ]
        }
    body = dict(model, properties={k: v for k, v in properties.items() if f"{{{k}}}" not in path})
    body["required"] = [r for r in model.get("required", []) if f"{{{r}}}" not in path]
    if not body["required"]:
        body.pop("required")
    return {"parameters": params, "requestBody": {"required": True, "content": {"application/json": {"schema": body}}}}


CONTEXT_SCHEMA = {"type": "string", "pattern": "^[a-z0-9._-]{1,64}$", "description": "The context (tenant)"}


def bearer_openapi(app: FastAPI) -> None:
    """Declare the bearer key every /api/v1 route takes (`Authorization: Bearer sk-...`)."""
    make = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = make()
            spec.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An Engram API key (sk-...)"}
            }
            for path, item in spec.get("paths", {}).items():
                if path.startswith("/api/v1/"):
                    for operation in item.values():
                        operation["security"] = [{"bearer": []}]
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend its OpenAPI document


# Every failure a route may answer, in the one error shape (`engram.api.errors`): a quota's 429 carries
# Retry-After; 503 is a store that failed (the message carries a trace id).
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["status", "code", "message"],
            "properties": {
                "status": {"type": "integer", "description": "the HTTP status"},
                "code": {"type": "string", "description": "e.g. invalid_input, not_found, rate_limited"},
                "message": {"type": "string"},
                "details": {"type": "object", "description": "e.g. the field at fault, retry_after"},
            },
        }
    },
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": description, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    for status, description in [
        (400, "invalid arguments"),
        (401, "no key, or a key that is not valid here"),
        (403, "the key's role or scopes do not allow it"),
        (404, "not found, or not visible to the key"),
        (409, "a conflict: a version or a unique value"),
        (413, "the request body is over the limit"),
        (429, "a quota or rate limit: retry after Retry-After seconds"),
        (503, "a store failed: retry"),
    ]
}


def mount_rest(app: FastAPI, engram: Engram, ops: list[AnyOperation]) -> None:
    bearer_openapi(app)
    for op in ops:
        for path in (op.path, *op.also):
            app.add_api_route(
                f"/api/v1/{{context_id}}{path}",
                _endpoint(engram, op),
                methods=[op.method],
                name=op.name if path == op.path else f"{op.name} ({path})",
                summary=op.summary,
                tags=[op.family],
                response_model=op.output or TextOutput,
                openapi_extra=_openapi(op, path),
                responses=ERROR_RESPONSES,
            )
