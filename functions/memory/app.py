"""The memory family's function: POST /mcp/memory and the memory REST routes (Spectron, Causantic)."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("memory", family_handler("memory"))
