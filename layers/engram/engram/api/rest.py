"""REST surface: one route per operation under /api/v1/{context_id}, generated from the registry."""

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from engram.api import dispatch
from engram.errors import EngramError, InvalidInput
from engram.operations import Operation, OpInput
from engram.operations.registry import TextOutput
from engram.services.identity import Principal, check_context
from engram.wiring import Engram


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def authenticate(engram: Engram, request: Request) -> Principal:
    token = bearer(request)
    return await anyio.to_thread.run_sync(engram.identity.authenticate, token)


def error_response(exc: EngramError) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="engram"'} if exc.status == 401 else None
    return JSONResponse(dispatch.error_body(exc), status_code=exc.status, headers=headers)


def _no_progress(done: float, total: float | None, message: str | None) -> None:
    return None


def _endpoint(engram: Engram, op: Operation) -> Callable[..., Awaitable[Any]]:
    async def endpoint(request: Request, context_id: str, args: OpInput) -> Any:
        try:
            check_context(context_id)
            if args.context_id not in (None, context_id):
                raise InvalidInput("context_id in the body differs from the one in the path")
            principal = await authenticate(engram, request)
            result = await dispatch.run(
                engram, op, principal, args.model_copy(update={"context_id": context_id}), _no_progress
            )
        except EngramError as exc:
            return error_response(exc)
        return {"text": result} if isinstance(result, str) else result

    where = Query() if op.method == "GET" else Body()
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
            inspect.Parameter(
                "context_id",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Annotated[str, Path(description="Tenant context")],
            ),
            inspect.Parameter("args", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Annotated[op.input, where]),
        ]
    )
    return endpoint


def mount_rest(app: FastAPI, engram: Engram, ops: list[Operation]) -> None:
    for op in ops:
        app.add_api_route(
            f"/api/v1/{{context_id}}{op.path}",
            _endpoint(engram, op),
            methods=[op.method],
            name=op.name,
            summary=op.summary,
            tags=[op.family],
            response_model=op.output or TextOutput,
            responses={400: {}, 401: {}, 403: {}, 404: {}, 409: {}, 413: {}},
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = [f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()]
        return error_response(InvalidInput("invalid arguments: " + "; ".join(parts)))
