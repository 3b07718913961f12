"""The edge of every request (engram.api.edge), over a raw socket: what HTTP clients would not send."""

from __future__ import annotations

import json
import socket
import time
import uuid
from urllib.parse import urlparse

import httpx
import pytest

from tests.conftest import Live


def raw(live: Live, request: bytes, timeout: float = 5.0) -> tuple[int, dict[str, object]]:
    """Send bytes as they are; the status and JSON body of the answer."""
    u = urlparse(live.url)
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += s.recv(65536)
    return int(head.split(b" ")[1]), json.loads(body)


def post(path: str, body: bytes, headers: bytes = b"", length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n".encode()
        + headers
        + b"\r\n"
        + body
    )


@pytest.mark.parametrize(
    "body",
    [b"\x80{}", b'{"content": "caf\xe9"}', b'{"query": "\xff\xfe"}', b'{"content": "\xed\xa0\x80"}'],
)
@pytest.mark.parametrize("path", ["/api/v1/acme/facts", "/api/v1/acme/context", "/mcp"])
def test_non_utf8_body_is_400(live: Live, path: str, body: bytes) -> None:
    auth = f"Authorization: Bearer {live.keys.agent}\r\n".encode()
    status, answer = raw(live, post(path, body, auth))
    assert status == 400 and answer["error"]["code"] == "invalid_input"  # type: ignore[index]
    assert "UTF-8" in answer["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize("path", ["/api/v1/acme/facts", "/mcp", "/healthz"])
def test_non_utf8_header_is_400_with_or_without_a_key(live: Live, path: str) -> None:
    for auth in (b"", f"Authorization: Bearer {live.keys.agent}\r\n".encode()):
        status, answer = raw(live, post(path, b"{}", auth + b"X-Note: caf\xe9\r\n"))
        assert status == 400 and answer["error"]["code"] == "invalid_input"  # type: ignore[index]
    status, answer = raw(live, post(path, b"{}", b"Authorization: Bearer sk-\xff\xfe\r\n"))
    assert status == 400


def test_declared_oversize_is_413_without_waiting_for_the_body(live: Live) -> None:
    limit = live.engram.settings.max_request_bytes
    for path in ("/api/v1/acme/facts", "/mcp", "/api/v1/acme/documents"):
        started = time.monotonic()
        status, answer = raw(live, post(path, b"{", length=40 * 1024 * 1024), timeout=3)
        assert status == 413 and answer["error"]["code"] == "payload_too_large"  # type: ignore[index]
        assert time.monotonic() - started < 2.5  # answered, not waiting for 40 MiB that never come
        assert limit < 40 * 1024 * 1024


def test_chunked_oversize_is_413(live: Live) -> None:
    limit = live.engram.settings.max_request_bytes
    piece = b"x" * 65536
    chunks = b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for _ in range(limit // len(piece) + 2))
    request = (
        f"POST /api/v1/acme/facts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {live.keys.agent}\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode() + chunks
    try:
        status, answer = raw(live, request)
    except (ConnectionResetError, BrokenPipeError):  # the server may close while we are still sending
        pytest.fail("the server closed without answering 413")
    assert status == 413 and answer["error"]["status"] == 413  # type: ignore[index]


def test_the_server_stays_up_and_well_formed_requests_still_work(live: Live) -> None:
    auth = f"Authorization: Bearer {live.keys.agent}\r\n".encode()
    status, answer = raw(live, post("/api/v1/acme/context", json.dumps({"query": "café"}).encode(), auth))
    assert status == 200 and "context" in answer


@pytest.mark.parametrize("path", ["/api/v1/acme/facts", "/mcp"])
def test_a_client_still_sending_its_oversize_body_reads_the_413(live: Live, path: str) -> None:
    """The 413 goes out as soon as the declared length is over the limit; a client that goes on sending its body
    after it (as HTTP clients do: they read once they have sent) still reads the answer. The server reads and
    drops the rest instead of closing on unread data (which resets the connection, answer and all)."""
    limit = live.engram.settings.max_request_bytes
    u = urlparse(live.url)
    auth = f"Authorization: Bearer {live.keys.agent}\r\n".encode()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(post(path, b"", auth, length=limit * 4))
        time.sleep(0.3)  # the 413 is written by now
        try:
            for _ in range(16):
                s.sendall(b"x" * (limit // 4))
                time.sleep(0.01)
        except (ConnectionResetError, BrokenPipeError):
            pytest.fail("the server closed on the unread body")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head = data.partition(b"\r\n\r\n")[0]
    assert head.startswith(b"HTTP/1.1 413"), data[:200]


def long_url_in_pieces(url: str, key: str, size: int = 50_000) -> tuple[int, bytes]:
    """A GET whose URL (`size` bytes of query) arrives in three reads, as a long one does over a real network: the
    status and body of the answer (0 and what came, if the server closed without one)."""
    u = urlparse(url)
    line = f"GET /api/v1/acme/profile?scopes={'n' * size} HTTP/1.1\r\n".encode()
    rest = f"Host: 127.0.0.1\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n".encode()
    data = b""
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        for piece in (line[:20_000], line[20_000:], rest):
            s.sendall(piece)
            time.sleep(0.05)
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return (int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1") else 0), body


def test_a_long_url_that_arrives_in_pieces_is_answered_by_the_app(live: Live) -> None:
    """The HTTP parser keeps room for a long request head (`edge.MAX_HEAD_BYTES`); with h11's own 16 KiB, a URL
    that came in more than one read was refused by the parser in plain text, and the connection closed on what
    was still coming (the fuzzer lost the answer to a reset)."""
    status, body = long_url_in_pieces(live.url, live.keys.agent)
    assert status == 400, body[:200]
    assert json.loads(body)["error"]["code"] == "invalid_input"


NOT_FOUND = {"status": 404, "code": "not_found", "message": "no route takes this path", "details": {}}


def test_a_path_no_route_takes_answers_in_engrams_shape_and_never_redirects(live: Live) -> None:
    """Starlette answered a path its routes missed by a slash with a 307 and an empty body, and sent the client on
    to another operation's route (`PATCH /documents/%2F` to `/documents`; the fuzzer found it), and a path no
    route takes with FastAPI's `{"detail": ...}`: now both answer in the seed's error shape, in place."""
    headers = {"Authorization": f"Bearer {live.keys.agent}", "Content-Type": "application/json"}
    with httpx.Client(base_url=live.url, headers=headers, follow_redirects=False) as http:
        for method, path in [
            ("PATCH", "/api/v1/acme/documents/%2F"),
            ("GET", "/api/v1/acme/documents/%2F"),
            ("DELETE", "/api/v1/acme/records/%2f"),
            ("GET", "/api/v1/acme/documents//"),
            ("GET", "/api/v1/acme/no-such-route"),
            ("POST", "/mcp/no-such-family"),
            ("GET", "/nothing/"),
        ]:
            answer = http.request(method, path, content=b"{}" if method in ("PATCH", "POST") else None)
            assert answer.status_code == 404, (method, path, answer.status_code, answer.text)
            assert answer.json() == {"error": NOT_FOUND}, (method, path)
        answer = http.put("/api/v1/acme/facts", content=b"{}")
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        assert answer.json()["error"]["code"] == "method_not_allowed"


def test_an_encoded_slash_never_reaches_another_resource(live: Live) -> None:
    """The router reads the decoded path, so `/documents/{id}%2Fchunks` was document `id`'s chunks. No id holds
    a slash: a path with an encoded one is not found."""
    headers = {"Authorization": f"Bearer {live.keys.agent}", "Content-Type": "application/json"}
    with httpx.Client(base_url=live.url + "/api/v1/acme", headers=headers, follow_redirects=False) as http:
        text = f"Edge probe {uuid.uuid4().hex}: an encoded slash is in no id."  # shares no word with other tests'
        made = http.post("/documents/ingest", json={"text": text, "title": "edge probe"})
        assert made.status_code == 200, made.text
        doc = made.json()["id"]
        assert http.get(f"/documents/{doc}/chunks").status_code == 200
        for path in (f"/documents/{doc}%2Fchunks", f"/documents/{doc}%2fchunks", f"/documents/{doc}%2F"):
            answer = http.get(path)
            assert answer.status_code == 404 and answer.json() == {"error": NOT_FOUND}, (path, answer.text)


def test_a_trailing_slash_is_answered_by_the_route_without_it(live: Live) -> None:
    """`/mcp/` and `/api/v1/acme/facts/` are what a client configured by hand often says: answered in place
    (Starlette redirected them before, and a client that did not follow got an empty body)."""
    headers = {"Authorization": f"Bearer {live.keys.agent}", "Accept": "application/json, text/event-stream"}
    fact = {"content": f"Zorblat {uuid.uuid4().hex} keeps a kayak."}  # shares no word with other tests' memories
    stored = httpx.post(live.url + "/api/v1/acme/facts/", json=fact, headers=headers)
    assert stored.status_code == 200 and stored.json()["turn_id"], stored.text
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "memory_recall", "arguments": {"query": "Who keeps a kayak?"}}}  # fmt: skip
    answer = httpx.post(live.url + "/mcp/", json=call, headers=headers)
    assert answer.status_code == 200, answer.text
    body = answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        body = [line[5:] for line in body.splitlines() if line.startswith("data:")][-1]
    result = json.loads(body)
    assert result["id"] == 7 and not result["result"].get("isError"), result


def test_health_answers_head_with_no_body(live: Live) -> None:
    """A load balancer's or uptime monitor's probe may be a HEAD: it was a 405. Now the GET's status and headers,
    no body, and the connection stays usable for the next request."""
    with httpx.Client(base_url=live.url) as http:
        head = http.head("/healthz")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == "application/json"
        assert http.get("/healthz").json()["status"] == "ok"  # the same connection, after the HEAD
