"""POST /mcp: every tool at one URL. Lists the tools itself; each tools/call runs in its family's function."""

from engram.api.lambda_runtime import gateway_handler, instrument

handler = instrument("gateway", gateway_handler())
