"""MCP surface: a low-level `mcp` Server whose tools are generated from the operation registry.

Stateless Streamable HTTP (both the 2025 initialize handshake and 2026-07-28 per-request protocol are
served by the SDK), and stdio. Operation failures are tool results with `isError: true` and
`structuredContent.error {status, code, message}`; JSON-RPC errors only for protocol faults.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args

import anyio
import anyio.from_thread  # calls report progress from their worker thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram import __version__
from engram.api import dispatch
from engram.api.errors import error_body
from engram.api.schemas import advertised, schema
from engram.families import find
from engram.kernel.caller import Principal
from engram.kernel.clock import iso
from engram.kernel.errors import EngramError
from engram.kernel.limits import scrub
from engram.kernel.metering import Cost
from engram.kernel.operation import AnyOperation
from engram.wiring import Engram

INSTRUCTIONS = (
    "Engram stores and recalls memory for agents. Call memory_store with what the user says, "
    "memory_recall before answering. Every tool takes an optional context_id (the tenant; default: "
    "the key's only context). An optional argument left out is false or empty unless its schema gives a default."
)
# Who calls, and the context to use when a tool call names none (a header, or ENGRAM_CONTEXT on stdio).
PrincipalOf = Callable[[ServerRequestContext[Any, Any]], tuple[Principal, str | None]]


def tool_of(op: AnyOperation, output_schemas: bool = True) -> types.Tool:
    """The tool tools/list shows. Output schemas (the results' shape) can be left out: a model needs none
    to call a tool, and they are a third of the catalogue's tokens (`ENGRAM_MCP_OUTPUT_SCHEMAS`)."""
    input_schema = advertised(schema(op.input))
    input_schema.pop("description", None)  # an input model's docstring: the tool's description says it
    for field, (default, cap) in (op.mcp_limits or {}).items():
        input_schema["properties"][field].update(default=default, maximum=cap)
    return types.Tool(
        name=op.name,
        description=op.summary,
        input_schema=input_schema,
        output_schema=schema(op.output, output=True) if output_schemas and op.output is not None else None,
        annotations=types.ToolAnnotations(read_only_hint=True) if op.read_only else None,
    )


def without_context_id(tool: types.Tool) -> types.Tool:
    props = {k: v for k, v in tool.input_schema.get("properties", {}).items() if k != "context_id"}
    return tool.model_copy(update={"input_schema": {**tool.input_schema, "properties": props}})


TOOL_ERROR = -32002  # Causantic's JSON-RPC code for a tool's failure
COST_META = "io.engram/cost"  # the `_meta` key of what a call cost


def as_text(result: Any) -> tuple[Any, str]:
    """A tool's result and its text content (JSON, or the text a tool answers with): made in the call's slot and
    thread (`dispatch.run`'s `finish`)."""
    if isinstance(result, str):
        return result, scrub(result)
    text = json.dumps(result)
    if "\\ud" in text:  # a surrogate: a lone one (stored before the edge refused them) cannot be sent
        result = scrub(result)
        text = json.dumps(result)
    return result, text


def failure(op: AnyOperation, tool: str, exc: EngramError) -> types.CallToolResult:
    """A failed call in the shape of the tool's seed: an `isError` result, or (Causantic) a JSON-RPC error
    -32002 naming the tool."""
    if op.errors == "jsonrpc":
        raise MCPError(code=TOOL_ERROR, message=f"{tool}: {exc.message}", data={"tool": tool, **exc.to_dict()})
    if op.errors == "agrama":
        # Agrama's fields last (`details` is its message); what the error knows besides (a syntax error's
        # line and column) beside them
        data = {**exc.to_dict(), **exc.details, "details": exc.message, "tool": tool,
                "timestamp": iso(datetime.now(UTC))}  # fmt: skip
        raise MCPError(code=agrama_code(exc), message=exc.message, data=data)
    return error_result(exc)


def agrama_code(exc: EngramError) -> int:
    """Agrama's error codes: -32002 a file that is not there, -32003 input it refuses (a syntax error, a
    path outside the workspace), -32001 the store failing, -32000 any other failure of the tool."""
    if exc.code in ("file_not_found", "not_found"):
        return -32002
    if exc.status in (400, 409, 413):
        return -32003
    if exc.status == 503:
        return -32001
    return -32000


def error_result(exc: EngramError) -> types.CallToolResult:
    body = error_body(exc)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body))], structured_content=body, is_error=True
    )


def apply_mcp_limits(op: AnyOperation, arguments: dict[str, Any]) -> dict[str, Any]:
    """Tighter caps for tool results that land in a model's context (Vectros' MCP defaults)."""
    if not op.mcp_limits or any(k in arguments for k in op.mcp_limits_unless):
        return arguments
    out = dict(arguments)
    for field, (default, cap) in op.mcp_limits.items():
        value = out.setdefault(field, default)
        if isinstance(value, int) and value > cap:
            raise MCPError(code=types.INVALID_PARAMS, message=f"invalid arguments: {field}: at most {cap} over MCP")
    return out


LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # ascending severity


class LogLevels:
    """`logging/setLevel` per key: the HTTP endpoint is stateless, so the level a client sets is kept for
    its key (in this process) and applies to that key's later calls. Log notifications ride a call's SSE
    stream (the guard streams a key's calls once it has set a level)."""

    def __init__(self) -> None:
        self._levels: dict[str, str] = {}

    def set(self, key_id: str, level: str) -> None:
        self._levels[key_id] = level

    def get(self, key_id: str) -> str | None:
        return self._levels.get(key_id)

    def wants(self, key_id: str, level: str) -> bool:
        chosen = self._levels.get(key_id)
        return chosen is not None and LEVELS.index(level) >= LEVELS.index(chosen)


async def _log(
    ctx: ServerRequestContext[Any, Any], levels: LogLevels, key_id: str, level: types.LoggingLevel, data: Any
) -> None:
    """A log notification to the caller, when it asked for this level (best effort): at 2026-07-28 only when
    this request's `_meta` asked (the SDK's session drops the rest), before it when the key set a level."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and not levels.wants(key_id, level):
        return
    with warnings.catch_warnings():  # the capability is deprecated at 2026-07-28; older clients use it
        warnings.simplefilter("ignore")
        with contextlib.suppress(Exception):
            await ctx.session.send_log_message(level, data, logger="engram", related_request_id=ctx.request_id)


RESOURCE_NOT_FOUND = -32002  # the MCP spec's code for an unknown resource


@dataclass(frozen=True)
class Resource:
    name: str
    description: str
    operation: str  # the tool whose payload the resource is


RESOURCES = {
    "engram://schemas": Resource("schema catalog", "The record, document and identity types (list_schemas).",
                                 "list_schemas"),
    "engram://identity": Resource("identity", "The calling key: principal, contexts, grant (current_identity).",
                                  "current_identity"),
}  # fmt: skip


def build_server(
    engram: Engram,
    ops: Sequence[AnyOperation],
    principal_of: PrincipalOf,
    name: str = "engram",
    transport: str = "http",
    log_levels: LogLevels | None = None,
) -> Server:
    """The MCP server of these operations. `log_levels`: the levels keys set (`logging/setLevel`), shared by
    every endpoint of one app and read by its fast path; a server of its own keeps its own."""
    levels = LogLevels() if log_levels is None else log_levels
    by_name = {n: op for op in ops for n in op.names}
    tools = [tool_of(op, engram.settings.mcp_output_schemas) for op in ops]
    one_context = [without_context_id(t) for t in tools]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        """A key with one context (or a request that names its context) has no use for `context_id`: its
        catalogue leaves it out (the tools still take it)."""
        try:
            principal, default_context = principal_of(ctx)
        except EngramError:
            return types.ListToolsResult(tools=tools)
        single = default_context is not None or len(principal.contexts) == 1
        return types.ListToolsResult(tools=one_context if single else tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        op = by_name.get(params.name)
        if op is None:
            raise MCPError(code=types.METHOD_NOT_FOUND, message=f"Unknown tool: {params.name}")
        try:
            args = op.parse(apply_mcp_limits(op, params.arguments or {}))
        except EngramError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message, data=exc.details or None) from None
        try:
            principal, default_context = principal_of(ctx)
        except EngramError as exc:
            return failure(op, params.name, exc)
        if args.context_id is None and default_context:
            args = args.model_copy(update={"context_id": default_context})
        token = anyio.from_thread

        def progress(done: float, total: float | None, message: str | None) -> None:
            try:
                token.run(ctx.session.report_progress, done, total, message)
            except Exception:  # progress is best effort: a closed stream must not fail the call
                return

        started = time.perf_counter()
        cost = Cost()
        try:
            result, text = await dispatch.run(engram, op, principal, args, progress, transport, cost, as_text)
        except EngramError as exc:
            await _log(ctx, levels, principal.key_id, "warning", {"tool": params.name, "error": exc.to_dict()})
            failed = failure(op, params.name, exc)
            return failed.model_copy(update={"meta": {COST_META: cost.figures()}})
        ms = round((time.perf_counter() - started) * 1000, 1)
        await _log(ctx, levels, principal.key_id, "info", {"tool": params.name, "ms": ms})
        meta = {COST_META: cost.figures()}  # what the call cost (engram.kernel.metering)
        if isinstance(result, str):
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], _meta=meta)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=result, _meta=meta
        )

    async def set_level(ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        try:
            principal, _ = principal_of(ctx)
        except EngramError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=exc.message) from None
        levels.set(principal.key_id, params.level)
        return types.EmptyResult()

    # Read-only resources (Vectros' schema catalog and identity) on every endpoint, whatever its tools: the
    # same payloads as their tools, run by the same path. Prompts: none, an empty list, not "method not found".
    offered = RESOURCES

    async def list_resources(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=r.name, description=r.description, mime_type="application/json")
                for uri, r in offered.items()
            ]
        )

    async def no_templates(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def no_prompts(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[])

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        resource = offered.get(str(params.uri))
        if resource is None:  # 2026-07-28 (SEP-2164): -32602 naming the uri; before: -32002
            code = types.INVALID_PARAMS if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else RESOURCE_NOT_FOUND
            raise MCPError(code=code, message=f"Resource not found: {params.uri}", data={"uri": str(params.uri)})
        op = find(resource.operation)
        assert op is not None, resource.operation
        try:
            principal, default_context = principal_of(ctx)
            args = op.input.model_validate({"context_id": default_context} if default_context else {})
            result = await dispatch.run(engram, op, principal, args, lambda *_: None, transport)
        except EngramError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=exc.message, data=exc.to_dict()) from None
        text = json.dumps(result)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type="application/json", text=text)]
        )

    async def get_prompt(ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")

    with warnings.catch_warnings():  # logging/setLevel is deprecated at 2026-07-28; clients before it use it
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(
            name,
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_list_resource_templates=no_templates,
            on_read_resource=read_resource,
            on_list_prompts=no_prompts,
            on_get_prompt=get_prompt,
            on_set_logging_level=set_level,
            get_tool_input_schema=lambda n: schema(by_name[n].input) if n in by_name else None,
        )
