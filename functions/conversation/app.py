"""The conversation family's function: POST /mcp/conversation and the thread REST routes."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("conversation", family_handler("conversation"))
