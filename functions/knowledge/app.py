"""The knowledge family's function: POST /mcp/knowledge and the document REST routes."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("knowledge", family_handler("knowledge"))
