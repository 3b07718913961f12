"""JSON nested deeper than Python's parser goes (it raises RecursionError, not ValueError) wherever a caller's text is
read as JSON: the whole body, a selector sent as JSON text, a cursor. Each is refused in the seed's error shape —
never a server error — and the server keeps answering (issue #22's rule, found by the Lambda fuzzer's
`create_session` case on 2026-12-08: a body holding the word "progressToken" was read for its `_meta`)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from engram.api.app import _tool_family, asks_for_stream
from tests.conftest import Live
from tests.functional.mcpclient import post_tool_call

DEEP = 5_000  # Python's recursion limit is 1,000 frames


def rpc_answer(r: httpx.Response) -> dict[str, Any]:
    text = r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    answer: dict[str, Any] = json.loads(text)
    return answer


def test_a_body_nested_too_deep_is_a_parse_error_even_naming_progress(live: Live) -> None:
    headers = {"Authorization": f"Bearer {live.keys.agent}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}  # fmt: skip
    for body in (b"[" * DEEP + b"]" * DEEP, b'{"progressToken": ' + b"[" * DEEP + b"]" * DEEP + b"}"):
        r = httpx.post(live.url + "/mcp", content=body, headers=headers)
        assert r.status_code < 500, r.text
        assert rpc_answer(r)["error"]["code"] == -32700  # parse error
    r = post_tool_call(live.url, live.keys.agent, "memory_recall", {"query": "still here?"})
    assert r.status_code == 200 and "result" in rpc_answer(r)


def test_a_selector_nested_too_deep_is_invalid_arguments_over_mcp_and_rest(live: Live) -> None:
    r = post_tool_call(live.url, live.keys.agent, "memory_recall", {"query": "x", "scopes": "[" * DEEP})
    assert r.status_code == 200, r.text
    answer = rpc_answer(r)
    assert answer.get("error", {}).get("code") == -32602 or answer["result"]["isError"], answer
    rest = httpx.get(
        f"{live.url}/api/v1/acme/profile",
        params={"scopes": "[" * DEEP},
        headers={"Authorization": f"Bearer {live.keys.agent}"},
    )
    assert rest.status_code == 400 and rest.json()["error"]["code"] == "invalid_input", rest.text


def test_a_cursor_nested_too_deep_is_an_invalid_cursor(live: Live) -> None:
    cursor = base64.urlsafe_b64encode(b"[" * 1_500).decode()  # within the cursor's 2,048 characters
    r = httpx.post(
        f"{live.url}/api/v1/acme/exports",
        json={"scope": "org/acme", "cursor": cursor},
        headers={"Authorization": f"Bearer {live.keys.management}"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor", r.text


def test_the_gateway_and_the_response_style_read_a_deep_body_as_no_message() -> None:
    deep = b'{"method": "tools/call", "params": {"_meta": {"progressToken": ' + b"[" * DEEP + b"]" * DEEP + b"}}}"
    assert _tool_family(deep) is None  # the AWS gateway forwards nothing (it raised: a 500 from the function)
    assert asks_for_stream(deep, logs=True) is False
