"""The entities family's function: POST /mcp/entities and the entity REST routes."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("entities", family_handler("entities"))
