"""The one HTTP rendering of an operation's failure, for every transport that answers in HTTP: the edge (body
limits, encoding), the MCP endpoints' guard (keys), the REST routes, the Lambda gateway. MCP tool results and
JSON-RPC errors carry the same `error_body` (`engram.api.mcp`)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Send

from engram.errors import EngramError

Headers = list[tuple[bytes, bytes]]


def error_body(exc: EngramError) -> dict[str, Any]:
    """Spectron reads `status`, Cortex `code`, `message` and `details`."""
    return {"error": exc.to_dict()}


def rendered(exc: EngramError, body: dict[str, Any] | None = None) -> tuple[int, Headers, bytes]:
    """(status, headers, bytes) of a failure: its body (`error_body` unless given), a 401's challenge, a 413's
    closing of the connection (the unread rest of the body is not waited for)."""
    payload = json.dumps(body if body is not None else error_body(exc)).encode()
    headers: Headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if exc.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="engram"'))
    if exc.status == 413:
        headers.append((b"connection", b"close"))
    return exc.status, headers, payload


async def send_error(send: Send, exc: EngramError, body: dict[str, Any] | None = None) -> None:
    """The failure as an ASGI response."""
    status, headers, payload = rendered(exc, body)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
