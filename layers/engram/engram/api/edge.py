"""The edge of every HTTP request, before any route: header encoding and the body-size limit.

- A header that is not UTF-8 answers 400 (ASGI hands headers over as bytes; every later `.decode()`
  would otherwise raise and answer 500).
- A body over `max_bytes` answers 413 before it is read: at once when Content-Length says so (a client
  that declares 40 MiB and sends less is not waited for), as soon as the count passes the limit when
  the body is chunked. The connection stays open while the client sends the rest, which the server drops
  (closing on unread data would reset the connection and lose the answer).
- A body that is not UTF-8 answers 400: JSON is UTF-8 (RFC 8259), and the parsers behind (the REST
  routes, the MCP SDK) would raise on it past their own error handling.
- A path holding an encoded slash (`%2F`) answers 404: no id, context or route holds one, and the router, which
  reads the decoded path, would take `/documents/a%2Fchunks` for document `a`'s chunks. One trailing slash is
  dropped (`/mcp/`, `/api/v1/acme/memories/`): the route without it answers, with no redirect.
- A body whose JSON escapes a lone surrogate (`"\\ud800"`: valid JSON text, not valid Unicode) answers 400
  naming the field, on MCP routes as a JSON-RPC error -32602 (the SDK's parser would say only "parse
  error"). Operations check their arguments again (`engram.kernel.limits`), for the transports without this edge.

The body is read here, once, and replayed to the app, so every route (REST, MCP, the AWS gateway) gets
the same rules. Bodies are small (JSON; uploads are base64 inside JSON), bounded by `max_bytes`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engram.api.errors import send_error
from engram.kernel.errors import EngramError, InvalidInput, NotFound, PayloadTooLarge
from engram.kernel.limits import lone_surrogates, where

_WITH_BODY = ("POST", "PUT", "PATCH")
# What the HTTP parser (h11, under uvicorn) holds of a request's line and headers while they arrive. h11's own
# 16 KiB is met by a long URL whenever it comes in more than one read: the parser then refuses it and the server
# closes with the rest unread, which resets the connection and can lose the 400 (the fuzzer met it: a GET of
# ~59 KB, 4 times in 60). With room for the longest URL a client sends, the request reaches the app, which answers
# in the seed's shape; a longer head is still refused.
MAX_HEAD_BYTES = 256 * 1024
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # cheap first look; a match is then parsed


class BadUnicode(InvalidInput):
    """A JSON body holding a lone surrogate: the field is named; MCP routes answer in JSON-RPC's shape."""

    def __init__(self, field: str, request_id: Any) -> None:
        super().__init__(f"invalid arguments: {field} is not valid Unicode (it holds a lone surrogate)",
                         details={"field": field})  # fmt: skip
        self.request_id = request_id


async def refuse(send: Send, exc: EngramError, jsonrpc: bool = False) -> None:
    body: dict[str, Any] | None = None
    if jsonrpc and isinstance(exc, BadUnicode):
        error = {"code": -32602, "message": exc.message, "data": exc.details}
        body = {"jsonrpc": "2.0", "id": exc.request_id, "error": error}
    await send_error(send, exc, body)


def routed(scope: Scope) -> Scope:
    """The request as the routes see it: not found when its path holds an encoded slash, one trailing slash
    dropped (but under /console/, whose pages are files: `/console/` is its index)."""
    path: str = scope["path"]
    raw: bytes = scope.get("raw_path") or path.encode()
    if b"%2f" in raw.lower():
        raise NotFound("no route takes this path")
    if len(path) > 1 and path.endswith("/") and raw.endswith(b"/") and not path.startswith("/console/"):
        return {**scope, "path": path[:-1], "raw_path": raw[:-1]}
    return scope


class Edge:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            scope = routed(scope)
            body = await self._check(scope, receive)
        except EngramError as exc:
            await refuse(send, exc, jsonrpc=str(scope.get("path", "")).startswith("/mcp"))
            return
        if body is None:
            await self.app(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # the disconnect, when the client goes

        await self.app(scope, replay, send)

    async def _check(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body (None for a method without one). Raises what the edge refuses."""
        length: str | None = None
        for name, value in scope["headers"]:
            try:
                name.decode("utf-8"), value.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput("a request header is not valid UTF-8") from None
            if name.lower() == b"content-length":
                length = value.decode()
        if length is not None and (not length.strip().isdigit()):
            raise InvalidInput("Content-Length is not a number")
        if length is not None and int(length) > self.max_bytes:
            raise PayloadTooLarge(f"request body over {self.max_bytes} bytes")
        if scope["method"] not in _WITH_BODY:
            return None
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise PayloadTooLarge(f"request body over {self.max_bytes} bytes")
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"request body is not valid UTF-8 (byte {exc.start})") from None
        if _ESCAPED_SURROGATE.search(body):
            _check_unicode(body)
        return body


def _check_unicode(body: bytes | str) -> None:
    """Raise BadUnicode for the first lone surrogate the JSON body holds (a pair is one valid character)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return  # not JSON: the route behind says so
    for at in lone_surrogates(message):
        request_id = message.get("id") if isinstance(message, dict) else None
        if not isinstance(request_id, str | int) or next(lone_surrogates(request_id), None) is not None:
            request_id = None
        raise BadUnicode(where(at), request_id)


def jsonrpc_unicode_error(line: str) -> str | None:
    """For a JSON-RPC message (one stdio line) holding a lone surrogate: the JSON-RPC error line that answers
    it (-32602 naming the field), else None. On stdio the SDK's parser would drop such a line unanswered."""
    if "\\u" not in line or not _ESCAPED_SURROGATE.search(line.encode()):
        return None
    try:
        _check_unicode(line)
    except BadUnicode as exc:
        error = {"code": -32602, "message": exc.message, "data": exc.details}
        return json.dumps({"jsonrpc": "2.0", "id": exc.request_id, "error": error})
    return None
