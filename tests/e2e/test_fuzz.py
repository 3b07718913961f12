"""Every tool, fuzzed over MCP and REST against `engram serve` (issue #22): so that the next family cannot reopen
the classes #22 closed.

Hypothesis (bounded: FUZZ_EXAMPLES per tool; seeded: `derandomize` in `make test`, the seed ENGRAM_FUZZ_SEED
names in `make fuzz`, so that a longer run explores cases CI never sends and any failure replays) generates each
tool's arguments from its own input schema — the schema the server validates with — and mixes in hostile values:
lone surrogates, NUL, bidi overrides, megabyte strings, deep nesting, huge and non-finite numbers, wrong types,
unknown arguments, paths and URLs, and, where a JSON Schema is taken, `$ref`s to files and URLs and catastrophic
patterns. Each call goes both ways, as a raw JSON-RPC `tools/call` on /mcp and as the tool's REST route.

Throughout:
- no answer is a 5xx, a JSON-RPC -32603, or an error whose status is 5xx;
- a health call answers within a second (a thread polls /healthz every 100 ms);
- nothing the fuzzer sends makes the server open a file or a connection (a loopback listener counts requests);
and afterwards every object written before the fuzzing (another scope's, one of each kind) reads back as it was.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from engram.devserver import cli, start, stop
from engram.families import select
from engram.operation import AnyOperation as Operation
from tests.fixtures.listener import loopback_listener

pytestmark = pytest.mark.e2e

FUZZ_EXAMPLES = int(os.environ.get("ENGRAM_FUZZ_EXAMPLES", "25"))
FUZZ_SEED = os.environ.get("ENGRAM_FUZZ_SEED")  # unset: derandomize (the same cases every run)
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
SETUP, FUZZ = "org/acme/user/setup", "org/acme/user/fuzz"
MEGABYTE = "A" * (1 << 20)


# -- the server and what it must keep ------------------------------------------------------------------------


@dataclass
class Target:
    url: str
    fuzz_key: str
    setup_key: str
    listener: str
    reached: list[str]
    written: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    health: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)


def _mcp(target: Target, key: str, tool: str, arguments: Any) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    raw = json.dumps(body, allow_nan=True)  # ASCII: a lone surrogate travels as its escape, NaN as itself
    headers = {"Authorization": f"Bearer {key}", **MCP_HEADERS}
    return httpx.post(target.url + "/mcp", content=raw.encode(), headers=headers, timeout=120)


def _setup_call(target: Target, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = _mcp(target, target.setup_key, tool, arguments)
    assert answer.status_code == 200 and "result" in answer.json(), (tool, answer.text)
    result = answer.json()["result"]
    assert not result.get("isError"), (tool, result)
    out: dict[str, Any] = result["structuredContent"]
    return out


def _write_before(target: Target) -> None:
    """One object of each kind, under another scope than the fuzzer's."""
    note = {"type": "object", "properties": {"title": {"type": "string", "pattern": "^[A-Z]"}}}
    mgmt = {"type": "note", "jsonSchema": note, "lookupFields": [{"field": "title", "ops": ["exact"]}]}
    _setup_call(target, "schemas_create", mgmt)
    w = target.written
    w["memory"] = _setup_call(target, "memory_store", {"content": "My name is Setup Sam. I live in Oslo."})
    w["document"] = _setup_call(target, "document_upload", {
        "bytes_base64": base64.b64encode(b"# Vault\n\nThe vault code is in the blue binder.").decode(),
        "title": "Vault notes", "filename": "vault.md"})  # fmt: skip
    w["record"] = _setup_call(target, "record_create", {"type": "note", "payload": {"title": "Setup record"}})
    w["context"] = _setup_call(target, "context_set", {"key": "setup-key", "value": {"kept": [1, "two"]}})
    message = {"thread_id": "setup-thread", "role": "user", "content": "Keep this message."}
    w["message"] = _setup_call(target, "conversation_append", message)
    w["file"] = _setup_call(target, "write_code", {"path": "setup/keep.py", "content": "X = 1\n", "reason": "setup"})
    w["decision"] = _setup_call(target, "record_decision", {"decision": "Keep it", "reasoning": "setup"})
    w["folder"] = _setup_call(target, "folder_create", {"name": "setup-folder"})


def _read_after(target: Target) -> None:
    """Every object written before the fuzzing reads back as it was."""
    w = target.written
    recall = _setup_call(target, "memory_recall", {"query": "where does Setup Sam live"})
    assert "Oslo" in recall["context"]
    doc = _setup_call(target, "document_get", {"id": w["document"]["id"]})
    assert doc["title"] == "Vault notes"
    record = _setup_call(target, "record_get", {"id": w["record"]["id"]})
    assert record["payload"] == {"title": "Setup record"}
    assert _setup_call(target, "context_get", {"key": "setup-key"})["value"] == {"kept": [1, "two"]}
    history = _setup_call(target, "conversation_history", {"thread_id": "setup-thread"})
    assert [m["content"] for m in history["messages"]] == ["Keep this message."]
    answer = _mcp(target, target.setup_key, "read_code", {"path": "setup/keep.py"})
    assert answer.json()["result"]["structuredContent"]["content"] == "X = 1\n"
    answer = _mcp(target, target.setup_key, "query_history", {"entity_id": w["decision"]["decision_id"]})
    assert answer.json()["result"]["structuredContent"]["total_results"] == 1
    folders = _setup_call(target, "folder_query", {})
    assert any(f["id"] == w["folder"]["id"] for f in folders["items"])
    for tool in ("list_schemas", "entity_list", "current_identity"):
        _setup_call(target, tool, {})
    _setup_call(target, "knowledge_collections", {"action": "list"})


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    data = tmp_path_factory.mktemp("fuzz")
    keys = []
    for grant in (FUZZ, SETUP):
        out = cli("keys", "create", "--context", "acme", "--principal", "management", "--grant", grant, data_dir=data)
        keys.append(out.strip().splitlines()[-1])
    cli("scopes", "create", "--context", "acme", "org/acme/user/alice", data_dir=data)
    with loopback_listener() as (listener, reached):
        proc, url = start(data)
        t = Target(url, keys[0], keys[1], listener, reached)
        stop_polling = threading.Event()

        def poll() -> None:
            with httpx.Client(timeout=5) as client:
                while not stop_polling.is_set():
                    began = time.perf_counter()
                    try:
                        ok = client.get(url + "/healthz").status_code == 200
                    except httpx.HTTPError as exc:
                        ok, why = False, repr(exc)
                    else:
                        why = "not 200"
                    t.health.append(time.perf_counter() - began)
                    if not ok:
                        t.health_failures.append(why)
                    stop_polling.wait(0.1)

        poller = threading.Thread(target=poll, daemon=True)
        try:
            _write_before(t)
            poller.start()
            yield t
        finally:
            stop_polling.set()
            poller.join(10)
            stop(proc)


# -- arguments from each tool's schema, with hostile values mixed in -----------------------------------------

HOSTILE_STRINGS = [
    "\ud800", "a\udfffb", "x\x00y", "\u202eevil\u202c", "\u2066isolate", "\ufeffbom", "e\u0301" * 50,
    "\U0001f600" * 10, MEGABYTE, "é" * 300_000, "../../etc/passwd", "/etc/passwd", "file:///etc/passwd",
    "C:\\Windows\\win.ini", "%00", "{{7*7}}", "'; DROP TABLE items; --", "a" * 40 + "!", " ", "",
    "\n\r\t", "org/acme/user/alice", "org/../../x", "Person:bob", "sk-not-a-key",
    # within most length limits, for the services' own parsing (extraction rules, tokenisers, chunkers)
    "My name is " + "A" * 3000, "I work at " + "Acme " * 600, "Actually, " * 300 + "I moved to Paris.",
    "(" * 2000, "\\" * 2000, "x@" * 1500, "\x00" * 2000, "\u202e" * 1000 + "abc", "a" * 3000 + "!",
    "I am " * 700, "My wife is " * 300 + "Carol.", "# " * 1000, "```" * 800, ". " * 1500,
]  # fmt: skip
HOSTILE_NUMBERS = [2**63, -(2**63) - 1, 2**64, 10**30, 1e308, -1e308, float("nan"), float("inf"), -0.0, -1, 0, 10**9]


def _deep(n: int, leaf: Any = 0) -> Any:
    out = leaf
    for i in range(n):
        out = [out] if i % 2 else {"d": out}
    return out


HOSTILE_VALUES: list[Any] = [*HOSTILE_STRINGS, *HOSTILE_NUMBERS, _deep(100), _deep(33, "\ud800"), [None] * 5000,
                             {"k" * 1000: "v"}, {"\ud800": 1}, True, None, [], {}]  # fmt: skip


def hostile_schemas(listener: str) -> list[Any]:
    return [
        {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}},
        {"type": "object", "properties": {"a": {"$ref": f"{listener}/ref.json"}}},
        {"$id": f"{listener}/root.json", "type": "object", "properties": {"a": {"$ref": "other.json"}}},
        {"type": "object", "properties": {"a": {"$dynamicRef": f"{listener}/d.json#x"}}},
        {"$schema": f"{listener}/meta.json", "type": "object"},
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}},
        {"type": "object", "patternProperties": {"^(x+x+)+y$": {}}},
        {"type": "object", "properties": {"a": {"pattern": "(a)\\1"}}},
        {"type": "object", "$defs": {"a": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}},
        {
            "type": "object",
            "$defs": {"n": {"allOf": [{"items": {"$ref": "#/$defs/n"}}] * 2}},
            "properties": {"x": {"$ref": "#/$defs/n"}},
        },
        {"type": "object", "properties": {"a": {"enum": list(range(5000))}}},
        {"type": "object", "properties": {"a": {"type": 5}}},
    ]


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.floats(allow_nan=False,
                        allow_infinity=False), st.text(max_size=12))  # fmt: skip
JSON = st.recursive(JSON_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                    st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)  # fmt: skip


def _sometimes_hostile(valid: st.SearchStrategy[Any], extra: list[Any] | None = None) -> st.SearchStrategy[Any]:
    """One value in eight hostile (a schema-taking field: one in three), so that many calls get past validation
    and reach the services with something hostile inside."""
    if extra:
        return st.integers(0, 2).flatmap(lambda n: st.sampled_from(extra) if n == 0 else valid)
    return st.integers(0, 7).flatmap(lambda n: st.sampled_from(HOSTILE_VALUES) if n == 0 else valid)


def from_schema(node: Any, defs: dict[str, Any], extra: list[Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy for values of the JSON Schema `node` (pydantic's dialect), a third of them hostile."""
    if not isinstance(node, dict) or depth > 6:
        return JSON
    if "$ref" in node:
        return from_schema(defs[node["$ref"].rsplit("/", 1)[-1]], defs, extra, depth + 1)
    if "anyOf" in node or "oneOf" in node:
        return st.one_of([from_schema(n, defs, extra, depth + 1) for n in node.get("anyOf") or node["oneOf"]])
    if "enum" in node:
        return _sometimes_hostile(st.sampled_from(node["enum"]))
    if "const" in node:
        return st.just(node["const"])
    kind = node.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**node, "type": k}, defs, extra, depth) for k in kind])
    valid: st.SearchStrategy[Any]
    if kind == "string":
        low = int(node.get("minLength", 0))
        valid = st.text(min_size=low, max_size=max(low, min(int(node.get("maxLength", 40)), 40)))
    elif kind == "integer":
        valid = st.integers(int(node.get("minimum", -(10**6))), int(node.get("maximum", 10**6)))
    elif kind == "number":
        valid = st.floats(node.get("minimum", -1e6), node.get("maximum", 1e6), allow_nan=False)
    elif kind == "boolean":
        valid = st.booleans()
    elif kind == "null":
        valid = st.none()
    elif kind == "array":
        items = from_schema(node.get("items", {}), defs, extra, depth + 1)
        valid = st.lists(items, min_size=int(node.get("minItems", 0)), max_size=max(int(node.get("minItems", 0)), 3))
    elif kind == "object" and node.get("properties"):
        valid = _object(node, defs, extra, depth)
    else:
        valid = JSON
    return _sometimes_hostile(valid, extra if kind == "object" and depth == 1 else None)


def _object(node: dict[str, Any], defs: dict[str, Any], extra: list[Any], depth: int) -> st.SearchStrategy[Any]:
    props: dict[str, Any] = node["properties"]
    required = set(node.get("required", []))
    fields = {k: from_schema(v, defs, extra, depth + 1) for k, v in props.items() if k != "context_id"}
    optional = {k: s for k, s in fields.items() if k not in required}

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        out = {k: draw(fields[k]) for k in fields if k in required}
        for k in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)) if optional else []:
            out[k] = draw(optional[k])
        if draw(st.integers(0, 19)) == 0:
            out[draw(st.sampled_from(["unknown", "__proto__", "\ud800", "context_id"]))] = draw(JSON)
        return out

    return build()


def arguments(op: Operation, listener: str) -> st.SearchStrategy[Any]:
    schema = op.input.model_json_schema(by_alias=True)
    extra = hostile_schemas(listener) if "jsonSchema" in schema.get("properties", {}) else []
    built = from_schema({k: v for k, v in schema.items() if k != "$defs"}, schema.get("$defs", {}), extra)
    return st.integers(0, 24).flatmap(lambda n: st.sampled_from(HOSTILE_VALUES) if n == 0 else built)


# -- sending and judging ---------------------------------------------------------------------------------------


def _quote(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, allow_nan=True)
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _rest(target: Target, op: Operation, args: Any) -> httpx.Response:
    args = dict(args) if isinstance(args, dict) else {"value": args}
    path = op.path
    for name in [p[1:-1] for p in path.split("/") if p.startswith("{")]:
        path = path.replace(f"{{{name}}}", _quote(args.pop(name, "x")) or "x")
    url = f"{target.url}/api/v1/acme{path}"
    headers = {"Authorization": f"Bearer {target.fuzz_key}", "Content-Type": "application/json"}
    body: bytes | None = None
    if op.method in ("GET", "DELETE"):
        query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in args.items())
        url += "?" + query if query else ""
    else:
        body = json.dumps(args, allow_nan=True).encode()
    if len(url) > 60_000:  # what httpx will not send: as it is, with the standard library's client
        return _long_url(target, op.method, url[len(target.url) :], headers, body)
    return httpx.request(op.method, url, content=body, headers=headers, timeout=120)


def _long_url(target: Target, method: str, path: str, headers: dict[str, str], body: bytes | None) -> httpx.Response:
    import http.client
    from urllib.parse import urlparse

    u = urlparse(target.url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers)
        got = conn.getresponse()
        status, body = got.status, got.read()
    except (ConnectionError, http.client.HTTPException):
        status, body = 431, b'{"refused": "the server closed the connection"}'  # refused, not failed
    finally:
        conn.close()
    return httpx.Response(status, content=body or b"{}")


def _judge_mcp(answer: httpx.Response, tool: str, args: Any) -> str:
    where = f"{tool} over MCP with {json.dumps(args, allow_nan=True)[:300]}"
    assert answer.status_code < 500, f"{where}: HTTP {answer.status_code} {answer.text[:500]}"
    body = answer.json()
    error = body.get("error")
    if error is not None:
        assert error["code"] != -32603, f"{where}: {error}"
        status = (error.get("data") or {}).get("status") if isinstance(error.get("data"), dict) else None
        assert status is None or status < 500, f"{where}: {error}"
        return "refused" if error["code"] == -32602 else "failed"
    result = body["result"]
    if result.get("isError"):
        status = ((result.get("structuredContent") or {}).get("error") or {}).get("status", 400)
        assert status < 500, f"{where}: {result}"
        return "failed"
    return "answered"


def _judge_rest(answer: httpx.Response, op: Operation, args: Any) -> None:
    where = f"{op.method} {op.path} with {json.dumps(args, allow_nan=True)[:300]}"
    assert answer.status_code < 500, f"{where}: HTTP {answer.status_code} {answer.text[:500]}"
    try:
        answer.json()  # an answer, in JSON
    except ValueError:
        raise AssertionError(f"{where}: HTTP {answer.status_code}, not JSON: {answer.text[:300]!r}") from None


OPS = select()


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_fuzz_every_tool_over_mcp_and_rest(target: Target, op: Operation) -> None:
    @settings(max_examples=FUZZ_EXAMPLES, derandomize=FUZZ_SEED is None, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(args=arguments(op, target.listener))
    def fuzz(args: Any) -> None:
        outcome = _judge_mcp(_mcp(target, target.fuzz_key, op.name, args), op.name, args)
        target.outcomes[outcome] = target.outcomes.get(outcome, 0) + 1
        _judge_rest(_rest(target, op, args), op, args)

    (fuzz if FUZZ_SEED is None else seed(int(FUZZ_SEED))(fuzz))()
    assert target.reached == [], f"{op.name} made the server reach out: {target.reached}"


def test_zz_throughout_health_answered_within_a_second_and_what_was_written_reads_back(target: Target) -> None:
    """Runs last in this module (pytest keeps the file's order): the health record of the whole fuzzing."""
    assert target.health, "the health poller never ran"
    assert target.health_failures == []
    assert max(target.health) < 1.0, f"slowest health answer {max(target.health):.2f} s"
    assert target.reached == []
    _read_after(target)
    # the fuzzing reached past validation: a share of the calls were answered, others failed in the services
    print(f"fuzz outcomes over MCP: {target.outcomes}, health p_max {max(target.health) * 1000:.0f} ms")
    assert target.outcomes.get("answered", 0) > len(OPS) and target.outcomes.get("failed", 0) > len(OPS) // 4
