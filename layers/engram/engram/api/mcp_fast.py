"""A stateless 2025-era `tools/call` answered as plain JSON without the SDK's per-request session (issue #26).

The SDK serves each stateless POST with a fresh transport, session, memory streams, task group and dispatcher:
~0.7 ms of every call on this machine (a REST call 1.53 ms, the same over MCP 2.20; bench/RESULTS.md). A
`tools/call` that needs none of them — one JSON-RPC request answered as JSON, no progress token, no log level
set by its key, a handshake-era protocol version (or none) — is checked here as the SDK checks it (transport
security, Accept, the request's shape, the method's params for the version), run by the server's own
`tools/call` handler, and answered in the SDK's shape (the result sieved for the version; an error as the
dispatcher writes it). Anything else, and anything a check would refuse, goes to the SDK untouched, which
answers as it always has.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import pydantic_core
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    INTERNAL_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from mcp_types import methods as _methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.types import Scope, Send

from engram.api.mcp import LogLevels
from engram.kernel.caller import Principal

log = logging.getLogger("engram.mcp")
METHOD = "tools/call"


class FastCall:
    """One endpoint's fast path: its server's `tools/call` handler behind the SDK's own checks."""

    def __init__(
        self, server: Server[Any], security: TransportSecuritySettings, max_body: int, levels: LogLevels
    ) -> None:
        self.server, self.max_body, self.levels = server, max_body, levels
        self.security = TransportSecurityMiddleware(security)

    async def answer(self, scope: Scope, body: bytes, principal: Any, send: Send) -> bool:
        """Answer the request and return True, or return False (nothing sent) for the SDK to answer it."""
        found = await self._request(Request(scope), body, principal)
        if found is None:
            return False
        request, message, version = found
        entry = self.server.get_request_handler(METHOD)
        if entry is None:
            return False
        try:
            params = entry.params_type.model_validate(message.params or {}, by_name=False)
        except ValidationError:
            return False  # the SDK's answer to malformed params
        ctx: ServerRequestContext[Any, Any] = ServerRequestContext(
            session=cast(Any, None),  # no back-channel: no progress token, no log level (checked above)
            lifespan_context=None,
            protocol_version=version,
            method=METHOD,
            params=message.params,
            request_id=message.id,
            request=request,
        )
        try:
            result = self._wire(version, await entry.handler(ctx, params))
            answer: BaseModel = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
        except Exception as exc:  # the dispatcher's boundary: an error on the wire, as it writes them
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("handler for %r raised", METHOD)
                error = ErrorData(code=0, message=str(exc))
            answer = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        payload = answer.model_dump_json(by_alias=True, exclude_unset=True).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        return True

    async def _request(
        self, request: Request, body: bytes, principal: Any
    ) -> tuple[Request, JSONRPCRequest, str] | None:
        """The HTTP request, its JSON-RPC request and protocol version, when this path may answer it."""
        if len(body) > self.max_body or b'"tools/call"' not in body or self.server.cache_hints.get(METHOD):
            return None  # (a cache hint on tools/call: the SDK's runner adds it to the result)
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None  # the 2026 entry
        if not isinstance(principal, Principal) or self.levels.get(principal.key_id) is not None:
            return None  # log notifications need the SDK's session
        if await self.security.validate_request(request, is_post=True) is not None:
            return None
        has_json, _ = check_accept_headers(request)
        content_type = request.headers.get("content-type", "")
        if not has_json or not any(p.strip() == "application/json" for p in content_type.split(";")[0].split(",")):
            return None
        try:
            message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
        except ValueError:  # ValidationError too
            return None
        if not isinstance(message, JSONRPCRequest) or message.method != METHOD:
            return None
        params = message.params or {}
        meta = params.get("_meta")
        if isinstance(meta, dict) and "progressToken" in meta:
            return None
        version = version or DEFAULT_NEGOTIATED_VERSION
        try:
            _methods.validate_client_request(METHOD, version, message.params)
        except (KeyError, ValueError):  # an unknown version, no such method at it, or params it refuses
            return None
        return request, message, version

    def _wire(self, version: str, result: Any) -> dict[str, Any]:
        """The handler's result as the SDK's runner shapes it for a handshake-era connection."""
        dumped: dict[str, Any] = (
            result.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(result, BaseModel) else {}
        )
        try:
            wire: dict[str, Any] = _methods.serialize_server_result(METHOD, version, dumped)
        except ValidationError:
            log.exception("handler for %r returned an invalid result", METHOD)
            raise MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result") from None
        return wire
