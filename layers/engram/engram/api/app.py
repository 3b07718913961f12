"""The ASGI application: MCP at /mcp and /mcp/{family}, REST under /api/v1, health and metrics."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import __version__
from engram.api import dispatch
from engram.api.mcp import build_server
from engram.api.rest import mount_rest
from engram.errors import EngramError, PayloadTooLarge, Unauthenticated
from engram.observability import metrics
from engram.operations.registry import families, select
from engram.services.identity import Principal
from engram.wiring import Engram

PRINCIPAL = "engram_principal"


CONTEXT_HEADERS = ("x-engram-context", "x-spectron-context")  # Spectron's client configs template this one


def _principal_of(ctx: ServerRequestContext[Any, Any]) -> tuple[Principal, str | None]:
    request = ctx.request
    scope = getattr(request, "scope", {}) if request is not None else {}
    principal = scope.get("state", {}).get(PRINCIPAL)
    if not isinstance(principal, Principal):
        raise Unauthenticated("missing or invalid API key")
    headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
    return principal, next((headers[h] for h in CONTEXT_HEADERS if headers.get(h)), None)


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Guard:
    """In front of an MCP endpoint: body-size limit (413), bearer key (401), and the response style.

    With `mcp_response=auto`, a POST whose JSON-RPC body asks for progress (a `progressToken`) is answered
    as an SSE stream so the notifications can flow; every other POST gets plain JSON, which is faster.
    """

    def __init__(self, json_app: ASGIApp, sse_app: ASGIApp, engram: Engram) -> None:
        self.json_app, self.sse_app, self.engram = json_app, sse_app, engram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.sse_app(scope, receive, send)
            return
        settings = self.engram.settings
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = b""
        try:
            length = headers.get("content-length", "0")
            if length.isdigit() and int(length) > settings.max_request_bytes:
                raise PayloadTooLarge(f"request body over {settings.max_request_bytes} bytes")
            if scope["method"] in ("POST", "GET", "DELETE"):
                scheme, _, token = headers.get("authorization", "").partition(" ")
                key = token.strip() if scheme.lower() == "bearer" else None
                principal = await anyio.to_thread.run_sync(self.engram.identity.authenticate, key)
                scope.setdefault("state", {})[PRINCIPAL] = principal
            if scope["method"] == "POST":
                more = True
                while more:
                    message = await receive()
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                    if len(body) > settings.max_request_bytes:  # chunked bodies have no content-length
                        raise PayloadTooLarge(f"request body over {settings.max_request_bytes} bytes")
        except EngramError as exc:
            extra = [(b"www-authenticate", b'Bearer realm="engram"')] if exc.status == 401 else []
            await _send_json(send, exc.status, dispatch.error_body(exc), extra)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if scope["method"] == "POST" and not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        stream = settings.mcp_response == "sse" or (settings.mcp_response == "auto" and b"progressToken" in body)
        await (self.sse_app if stream else self.json_app)(scope, replay, send)


def create_app(engram: Engram) -> FastAPI:
    settings = engram.settings
    tool_filter = settings.tool_filter()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", *settings.allowed_hosts],
        allowed_origins=[
            "http://127.0.0.1:*",
            "http://localhost:*",
            "http://[::1]:*",
            *(f"https://{h}" for h in settings.allowed_hosts),
        ],
    )
    endpoints: dict[str, tuple[StreamableHTTPSessionManager, StreamableHTTPSessionManager]] = {}
    for family in [None, *families()]:
        ops = select(tool_filter, family)
        if not ops:
            continue
        server = build_server(engram, ops, _principal_of, name=f"engram-{family}" if family else "engram")
        json_manager, sse_manager = (
            StreamableHTTPSessionManager(
                app=server,
                json_response=json_response,
                stateless=True,
                security_settings=security,
                max_request_body_size=settings.max_request_bytes,
            )
            for json_response in (True, False)
        )
        endpoints["/mcp" + (f"/{family}" if family else "")] = (json_manager, sse_manager)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for managers in endpoints.values():
                for manager in managers:
                    await stack.enter_async_context(manager.run())
            yield

    app = FastAPI(
        title="Engram",
        version=__version__,
        lifespan=lifespan,
        description="Memory and knowledge for AI agents, over MCP and REST.",
    )
    for path, (json_manager, sse_manager) in endpoints.items():
        guard = Guard(StreamableHTTPASGIApp(json_manager), StreamableHTTPASGIApp(sse_manager), engram)
        app.add_route(path, guard, methods=["GET", "POST", "DELETE"])  # type: ignore[arg-type]
    mount_rest(app, engram, select(tool_filter))

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/metrics", include_in_schema=False)
    async def get_metrics() -> list[dict[str, Any]]:
        return metrics.snapshot()

    return app
