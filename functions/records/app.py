"""The records family's function: POST /mcp/records and the records REST routes (typed records, schemas,
version history)."""

from engram.api.lambda_runtime import family_handler, instrument

handler = instrument("records", family_handler("records"))
