"""MCP surface: a low-level `mcp` Server whose tools are generated from the operation registry.

Stateless Streamable HTTP (both the 2025 initialize handshake and 2026-07-28 per-request protocol are
served by the SDK), and stdio. Operation failures are tool results with `isError: true` and
`structuredContent.error {status, code, message}`; JSON-RPC errors only for protocol faults.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ValidationError

from engram import __version__
from engram.api import dispatch
from engram.errors import EngramError
from engram.operations import Operation
from engram.services.identity import Principal
from engram.wiring import Engram

INSTRUCTIONS = (
    "Engram stores and recalls memory for agents. Call memory_store with what the user says, "
    "memory_recall before answering."
)
# Who calls, and the context to use when a tool call names none (a header, or ENGRAM_CONTEXT on stdio).
PrincipalOf = Callable[[ServerRequestContext[Any, Any]], tuple[Principal, str | None]]


def compact(node: Any, nullable: bool = False) -> Any:
    """A smaller JSON schema with the same meaning for clients: no titles, no `default: null`, and
    `anyOf [X, null]` written as X (an optional argument is simply omitted). tools/list is read into
    the model's context window, so its size is a cost."""
    if isinstance(node, list):
        return [compact(v, nullable) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: compact(v, nullable) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if nullable:  # output schemas: clients validate results against them, and results do hold nulls
        return out
    if out.get("default", 0) is None:
        del out["default"]
    options = out.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        del out["anyOf"]
        if len(rest) == 1:
            out = {**rest[0], **out}
        else:
            out["anyOf"] = rest
    return out


def schema(model: type[BaseModel], output: bool = False) -> dict[str, Any]:
    return compact(model.model_json_schema(by_alias=True), nullable=output)  # type: ignore[no-any-return]


def tool_of(op: Operation) -> types.Tool:
    input_schema = schema(op.input)
    for field, (default, cap) in (op.mcp_limits or {}).items():
        input_schema["properties"][field].update(default=default, maximum=cap)
    return types.Tool(
        name=op.name,
        description=op.summary,
        input_schema=input_schema,
        output_schema=schema(op.output, output=True) if op.output is not None else None,
        annotations=types.ToolAnnotations(read_only_hint=op.read_only),
    )


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)


def error_result(exc: EngramError) -> types.CallToolResult:
    body = dispatch.error_body(exc)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(body))], structured_content=body, is_error=True
    )


def apply_mcp_limits(op: Operation, arguments: dict[str, Any]) -> dict[str, Any]:
    """Tighter caps for tool results that land in a model's context (Vectros' MCP defaults)."""
    if not op.mcp_limits:
        return arguments
    out = dict(arguments)
    for field, (default, cap) in op.mcp_limits.items():
        value = out.setdefault(field, default)
        if isinstance(value, int) and value > cap:
            raise MCPError(code=types.INVALID_PARAMS, message=f"invalid arguments: {field}: at most {cap} over MCP")
    return out


def build_server(
    engram: Engram,
    ops: Sequence[Operation],
    principal_of: PrincipalOf,
    name: str = "engram",
    transport: str = "http",
) -> Server:
    by_name = {n: op for op in ops for n in op.names}
    tools = [tool_of(op) for op in ops]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        op = by_name.get(params.name)
        if op is None:
            raise MCPError(code=types.METHOD_NOT_FOUND, message=f"Unknown tool: {params.name}")
        try:
            args = op.input.model_validate(apply_mcp_limits(op, params.arguments or {}))
        except ValidationError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=_validation_message(exc)) from None
        try:
            principal, default_context = principal_of(ctx)
        except EngramError as exc:
            return error_result(exc)
        if args.context_id is None and default_context:
            args = args.model_copy(update={"context_id": default_context})
        token = anyio.from_thread

        def progress(done: float, total: float | None, message: str | None) -> None:
            try:
                token.run(ctx.session.report_progress, done, total, message)
            except Exception:  # progress is best effort: a closed stream must not fail the call
                return

        try:
            result = await dispatch.run(engram, op, principal, args, progress, transport)
        except EngramError as exc:
            return error_result(exc)
        if isinstance(result, str):
            return types.CallToolResult(content=[types.TextContent(type="text", text=result)])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result))], structured_content=result
        )

    return Server(
        name,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda n: schema(by_name[n].input) if n in by_name else None,
    )
