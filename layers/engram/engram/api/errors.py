"""The one HTTP rendering of an operation's failure, for every transport that answers in HTTP: the edge (body
limits, encoding), the MCP endpoints' guard (keys), the REST routes, the Lambda gateway. MCP tool results and
JSON-RPC errors carry the same `error_body` (`engram.api.mcp`)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Send

from engram.kernel.errors import EngramError, RateLimited, Unauthenticated

Headers = list[tuple[bytes, bytes]]


def error_body(exc: EngramError) -> dict[str, Any]:
    """Spectron reads `status`, Cortex `code`, `message` and `details`."""
    return {"error": exc.to_dict()}


def rendered(exc: EngramError, body: dict[str, Any] | None = None) -> tuple[int, Headers, bytes]:
    """(status, headers, bytes) of a failure: its body (`error_body` unless given), a 401's challenge. A 413 does
    not close the connection: it is answered before the body is read, and the server (uvicorn over h11) reads and
    drops the rest as it comes; closing on unread data would reset the connection and lose the answer to a
    client still sending (most clients read only once they have sent)."""
    payload = json.dumps(body if body is not None else error_body(exc)).encode()
    headers: Headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if isinstance(exc, Unauthenticated):
        headers.append((b"www-authenticate", challenge(exc).encode()))
    if isinstance(exc, RateLimited):
        headers.append((b"retry-after", str(exc.retry_after).encode()))
    return exc.status, headers, payload


def challenge(exc: Unauthenticated) -> str:
    """RFC 6750's `WWW-Authenticate` of a 401, pointing at the protected resource metadata (RFC 9728) where
    the surface set it; `error="invalid_token"` when a token was presented and refused."""
    parts = ['Bearer realm="engram"']
    if exc.resource_metadata:
        parts.append(f'resource_metadata="{exc.resource_metadata}"')
    if exc.code == "invalid_token":
        parts.append('error="invalid_token"')
    return ", ".join(parts)


async def send_error(send: Send, exc: EngramError, body: dict[str, Any] | None = None) -> None:
    """The failure as an ASGI response."""
    status, headers, payload = rendered(exc, body)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
