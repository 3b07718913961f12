"""The working-context family's function: POST /mcp/context and the context REST routes."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("context", family_handler("context"))
