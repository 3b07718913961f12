"""What the seed replay modules share."""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError

from tests.functional.mcpclient import connect


async def refusal(url: str, key: str, tool: str, arguments: dict[str, Any], **headers: str) -> str | None:
    """Call `tool` as a seed's example does: None when it answers without error, else why it did not (the
    error is kept and returned once the client's task group has closed, not raised inside it)."""
    async with connect(url, key, extra_headers=headers or None) as c:
        try:
            result = await c.call_tool(tool, arguments)
        except MCPError as exc:
            return exc.error.message
    return None if not result.is_error else str(result.structured_content)
