"""The identity family's function: POST /mcp/identity and the scopes / identity REST routes."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("identity", family_handler("identity"))
