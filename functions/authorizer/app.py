"""The API Gateway Lambda authorizer: bearer key -> principal, contexts and grant."""

from engram.api.lambda_runtime import authorizer_handler, instrument

handler = instrument("authorizer", authorizer_handler(), http=False, tracing=False)
