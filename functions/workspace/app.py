"""The workspace family's function: POST /mcp/workspace and its REST routes (Agrama's code workspace)."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("workspace", family_handler("workspace"))
