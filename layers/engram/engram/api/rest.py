"""REST surface: one route per operation under /api/v1/{context_id}, generated from the registry.

Arguments come from the JSON body (or the query string for GET and DELETE) plus the path; they are
validated against the operation's input model here, after the key is checked, so a caller without
a valid key learns nothing about the route's arguments.
"""

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from engram.api import dispatch
from engram.api.auth import principal_for
from engram.api.mcp import schema
from engram.errors import EngramError, InvalidInput
from engram.operations import Operation
from engram.operations.registry import TextOutput
from engram.services.identity import Principal, check_context
from engram.wiring import Engram

_BODYLESS = ("GET", "DELETE")


async def authenticate(engram: Engram, request: Request) -> Principal:
    return await anyio.to_thread.run_sync(principal_for, engram, request.scope)


def error_response(exc: EngramError) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="engram"'} if exc.status == 401 else None
    return JSONResponse(dispatch.error_body(exc), status_code=exc.status, headers=headers)


def validation_message(exc: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors(include_url=False)]
    return "invalid arguments: " + "; ".join(parts)


def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None


async def _arguments(request: Request, method: str) -> dict[str, Any]:
    if method in _BODYLESS:
        return dict(request.query_params)
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not JSON: {exc.msg}") from None
    except (UnicodeDecodeError, RecursionError):  # the edge refuses non-UTF-8 first; nesting too deep here
        raise InvalidInput("request body is not JSON") from None
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object")
    return body


def _endpoint(engram: Engram, op: Operation) -> Callable[[Request], Awaitable[Any]]:
    async def endpoint(request: Request) -> Any:
        try:
            path = dict(request.path_params)
            context_id = check_context(path.pop("context_id"))
            principal = await authenticate(engram, request)
            raw = await _arguments(request, op.method)
            if raw.get("context_id") not in (None, context_id):
                raise InvalidInput("context_id in the body differs from the one in the path")
            try:
                args = op.input.model_validate({**raw, **path, "context_id": context_id})
            except ValidationError as exc:
                raise InvalidInput(validation_message(exc)) from None
            result = await dispatch.run(engram, op, principal, args, _no_progress)
        except EngramError as exc:
            return error_response(exc)
        return {"text": result} if isinstance(result, str) else result

    return endpoint


def _openapi(op: Operation) -> dict[str, Any]:
    model = schema(op.input)
    if op.method in _BODYLESS:
        required = set(model.get("required", []))
        return {
            "parameters": [
                {"name": name, "in": "query", "required": name in required, "schema": prop}
                for name, prop in model.get("properties", {}).items()
                if name != "context_id" and f"{{{name}}}" not in op.path
            ]
        }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model}}}}


def mount_rest(app: FastAPI, engram: Engram, ops: list[Operation]) -> None:
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
                openapi_extra=_openapi(op),
                responses={400: {}, 401: {}, 403: {}, 404: {}, 409: {}, 413: {}},
            )
