"""The ASGI application: MCP at /mcp and /mcp/{family}, REST under /api/v1, health and metrics."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram import __version__
from engram.api.auth import WELL_KNOWN, base_url, principal_for, resource_path
from engram.api.console import mount_console
from engram.api.edge import Edge
from engram.api.errors import send_error
from engram.api.mcp import RESOURCES, LogLevels, build_server
from engram.api.mcp_fast import FastCall
from engram.api.rest import error_response, mount_rest
from engram.families import families, find, select
from engram.kernel.caller import ROLES, Caller, Principal
from engram.kernel.errors import EngramError, Forbidden, MethodNotAllowed, NotFound, Unauthenticated
from engram.kernel.observability import metrics
from engram.wiring import Engram

PRINCIPAL = "engram_principal"
DOCS_ASSETS = "/docs-assets"  # Swagger UI's and ReDoc's files


CONTEXT_HEADERS = ("x-engram-context", "x-spectron-context")  # Spectron's client configs template this one


def _principal_of(ctx: ServerRequestContext[Any, Any]) -> tuple[Principal, str | None]:
    request = ctx.request
    scope = getattr(request, "scope", {}) if request is not None else {}
    principal = scope.get("state", {}).get(PRINCIPAL)
    if not isinstance(principal, Principal):
        raise Unauthenticated("missing or invalid API key")
    headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
    return principal, next((headers[h] for h in CONTEXT_HEADERS if headers.get(h)), None)


Reply = tuple[int, list[tuple[bytes, bytes]], bytes]
"""An HTTP answer: status, headers, body."""
Forward = Callable[[str, Scope, bytes], Awaitable[Reply]]
"""(family, ASGI scope, JSON-RPC body) -> (status, headers, body): runs a `tools/call` elsewhere."""


def _tool_family(body: bytes) -> str | None:
    """The family of the tool a `tools/call` body names, or of the tool behind the resource a
    `resources/read` names; None for any other message (or an unknown tool or resource)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    method = message.get("method") if isinstance(message, dict) else None
    params = message.get("params") if isinstance(message, dict) else None
    if method not in ("tools/call", "resources/read") or not isinstance(params, dict):
        return None
    if method == "resources/read":
        resource = RESOURCES.get(str(params.get("uri")))
        name = resource.operation if resource is not None else None
    else:
        name = params.get("name")
    op = find(name) if isinstance(name, str) else None
    return op.family if op is not None else None


class Guard:
    """In front of an MCP endpoint: bearer key (401) and the response style (the body's size and encoding
    are checked before, at the edge).

    With `mcp_response=auto`, a POST whose JSON-RPC body asks for progress (a `progressToken`), or a tool
    call by a key that set a log level, is answered as an SSE stream so the notifications can flow; every
    other POST gets plain JSON, which is faster.
    With `forward`, a `tools/call` is sent to the function of the tool's family (the AWS gateway).
    """

    def __init__(self, endpoint: Endpoint, engram: Engram, forward: Forward | None = None) -> None:
        self.endpoint, self.engram, self.forward = endpoint, engram, forward
        self.fast = (
            FastCall(endpoint.server, endpoint.security, endpoint.max_body, endpoint.levels)
            if engram.settings.mcp_fast_path
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        json_app, sse_app = self.endpoint.json_app, self.endpoint.sse_app
        if json_app is None or sse_app is None:
            raise RuntimeError("the MCP endpoint is not running: serve the app with its lifespan")
        if scope["type"] != "http":
            await sse_app(scope, receive, send)
            return
        settings = self.engram.settings
        body = b""
        try:
            if scope["method"] in ("POST", "GET", "DELETE"):
                principal = await anyio.to_thread.run_sync(principal_for, self.engram, scope)
                scope.setdefault("state", {})[PRINCIPAL] = principal
            if scope["method"] == "POST":  # the edge (engram.api.edge) has read it, within the size limit
                more = True
                while more:
                    message = await receive()
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
        except EngramError as exc:
            await send_error(send, exc)
            return
        family = _tool_family(body) if self.forward is not None and scope["method"] == "POST" else None
        if family is not None and self.forward is not None:
            status, out_headers, payload = await self.forward(family, scope, body)
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if scope["method"] == "POST" and not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        # progress notifications, or log notifications the key asked for (logging/setLevel), need a stream
        principal = scope.get("state", {}).get(PRINCIPAL)
        logs = isinstance(principal, Principal) and self.endpoint.levels.get(principal.key_id) is not None
        wants_stream = scope["method"] == "POST" and asks_for_stream(body, logs)
        stream = settings.mcp_response == "sse" or (settings.mcp_response == "auto" and wants_stream)
        if (
            not stream
            and scope["method"] == "POST"
            and self.fast
            and await self.fast.answer(scope, body, principal, send)
        ):
            return
        await (sse_app if stream else json_app)(scope, replay, send)


LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"  # a 2026 request asks for log notifications per request


def asks_for_stream(body: bytes, logs: bool) -> bool:
    """Whether a POST's JSON-RPC body (a message or a batch) needs an SSE answer: a request whose `_meta` holds a
    `progressToken`, or a `tools/call` that wants log notifications — by its key's level (`logs`) or by its own
    `_meta`. The bytes are looked at first (most bodies name neither), then read as JSON: an argument that happens to
    say "progressToken" asks for nothing."""
    if not logs and b"progressToken" not in body and LOG_LEVEL_META.encode() not in body:
        return False
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return False
    for message in parsed if isinstance(parsed, list) else [parsed]:
        params = message.get("params") if isinstance(message, dict) else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        if "progressToken" in meta:
            return True
        if isinstance(message, dict) and message.get("method") == "tools/call" and (logs or LOG_LEVEL_META in meta):
            return True
    return False


class Endpoint:
    """One MCP endpoint (`/mcp` or `/mcp/{family}`): its server and the session managers that serve it.

    The managers are made afresh each time the app's lifespan is entered: a `StreamableHTTPSessionManager`
    can run only once, uvicorn enters the lifespan once per process, and Mangum (Lambda) once per invocation.
    """

    def __init__(self, server: Any, security: TransportSecuritySettings, max_body: int, levels: LogLevels) -> None:
        self.server, self.security, self.max_body, self.levels = server, security, max_body, levels
        self.json_app: ASGIApp | None = None
        self.sse_app: ASGIApp | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        json_manager, sse_manager = (
            StreamableHTTPSessionManager(
                app=self.server,
                json_response=json_response,
                stateless=True,
                security_settings=self.security,
                max_request_body_size=self.max_body,
            )
            for json_response in (True, False)
        )
        async with json_manager.run(), sse_manager.run():
            self.json_app, self.sse_app = StreamableHTTPASGIApp(json_manager), StreamableHTTPASGIApp(sse_manager)
            try:
                yield
            finally:
                self.json_app = self.sse_app = None


async def no_route(request: Request, exc: Exception) -> Response:
    """What the router answers by itself (a path no route takes, a method its path does not) in Engram's error
    shape, never FastAPI's `detail`. No redirects (`redirect_slashes` is off; the edge drops a trailing slash):
    Starlette redirected `PATCH /documents/%2F` to `/documents`, another operation's route."""
    assert isinstance(exc, HTTPException)
    error = (
        NotFound("no route takes this path")
        if exc.status_code == 404
        else MethodNotAllowed(f"this path does not take {request.method}")
        if exc.status_code == 405
        else EngramError(str(exc.detail), code="http_error")
    )
    error.status = exc.status_code
    answer = error_response(error)
    answer.headers.update(exc.headers or {})  # a 405's Allow
    return answer


def create_app(engram: Engram, forward: Forward | None = None) -> FastAPI:
    """The app serving every operation `ENGRAM_MCP_TOOLS` selects.

    `forward` (the AWS gateway) sends each MCP `tools/call` to the function of the tool's family instead of
    running it here; `initialize`, `tools/list` and the rest are still answered here.
    """
    settings = engram.settings
    tool_filter = settings.tool_filter()
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=settings.dns_rebinding_protection,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", *settings.allowed_hosts],
        allowed_origins=[
            "http://127.0.0.1:*",
            "http://localhost:*",
            "http://[::1]:*",
            *(f"https://{h}" for h in settings.allowed_hosts),
        ],
    )
    endpoints: dict[str, Endpoint] = {}
    levels = LogLevels()  # the log levels keys set, one table for every endpoint of this app
    for family in [None, *families()]:
        ops = select(tool_filter, family)
        if not ops:
            continue
        name = f"engram-{family}" if family else "engram"
        server = build_server(engram, ops, _principal_of, name=name, log_levels=levels)
        endpoints["/mcp" + (f"/{family}" if family else "")] = Endpoint(
            server, security, settings.max_request_bytes, levels
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for endpoint in endpoints.values():
                await stack.enter_async_context(endpoint.running())
            yield

    # /docs and /redoc from assets the package ships (fastapi-offline), not a CDN: they work offline. The
    # Lambda layers leave those assets out (2.8 MB of a function's 150): there /docs loads them from the CDN.
    description = "Memory and knowledge for AI agents, over MCP and REST. Authorize with an Engram key (sk-...)."
    try:
        from fastapi_offline import FastAPIOffline
    except ImportError:
        app = FastAPI(
            title="Engram", version=__version__, lifespan=lifespan, description=description, redirect_slashes=False
        )
    else:
        app = FastAPIOffline(
            title="Engram",
            version=__version__,
            lifespan=lifespan,
            description=description,
            static_url=DOCS_ASSETS,
            redirect_slashes=False,
        )
    app.add_exception_handler(HTTPException, no_route)
    for path, endpoint in endpoints.items():
        guard = Guard(endpoint, engram, forward if path == "/mcp" else None)
        app.add_route(path, guard, methods=["GET", "POST", "DELETE"])  # type: ignore[arg-type]  # an ASGI app: Starlette routes it as one
    mount_rest(app, engram, select(tool_filter))
    mount_console(app, lambda: [*settings.oauth_allowed_issuers, *engram.identity.issuers.all_issuers()])
    app.add_middleware(Edge, max_bytes=settings.max_request_bytes)

    @app.api_route("/healthz", methods=["GET", "HEAD"], include_in_schema=False)  # HEAD: load balancers' probes
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/.well-known/engram-receipt-key", include_in_schema=False)
    async def receipt_key() -> dict[str, str]:
        """The Ed25519 key erasure receipts are signed with (engram.trust.receipts): a receipt is checked offline
        against it (`engram erasure verify RECEIPT --public-key KEY`)."""
        key = await anyio.to_thread.run_sync(lambda: engram.erasure.public_key())
        return {"algorithm": "Ed25519", "public_key": key}

    async def protected_resource(request: Request) -> JSONResponse:
        """OAuth 2.0 Protected Resource Metadata (RFC 9728) of `/mcp`, `/mcp/{family}` or `/api/v1` (the path
        after the well-known segment), or of the deployment (no path): what MCP clients discover on a 401."""
        path = "/" + request.path_params.get("path", "").strip("/")
        resource = resource_path(path) if path != "/" else ""
        if path != "/" and resource != path:
            return JSONResponse({"error": "not_found"}, status_code=404)
        servers = settings.oauth_authorization_servers or await anyio.to_thread.run_sync(
            engram.identity.issuers.all_issuers
        )
        body = {
            "resource": base_url(settings.public_url, request.scope) + resource,
            "authorization_servers": servers,
            "scopes_supported": [f"engram:{role}" for role in ROLES],
            "bearer_methods_supported": ["header"],
            "resource_name": "Engram",
        }
        return JSONResponse(body, headers={"cache-control": "public, max-age=300"})

    app.add_route(WELL_KNOWN, protected_resource, methods=["GET"], include_in_schema=False)
    app.add_route(WELL_KNOWN + "/{path:path}", protected_resource, methods=["GET"], include_in_schema=False)

    @app.get("/metrics", include_in_schema=False)
    async def get_metrics(request: Request) -> Response:
        """The process's counters of the contexts whose manager calls (a management key governing the whole
        context): who is refused where is each tenant's own, and nothing without a key."""
        try:
            principal = await anyio.to_thread.run_sync(principal_for, engram, request.scope)
            if principal.role != "management":
                raise Forbidden("metrics are for a context's manager", code="forbidden")
            governed = [c for c in principal.contexts if engram.identity.governs(Caller(principal, c), None)]
        except EngramError as exc:
            return error_response(exc)
        return JSONResponse(metrics.snapshot(governed))

    return app
