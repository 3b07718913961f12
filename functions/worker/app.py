"""The ingest worker: SQS batches of background jobs and S3 inbox events, with partial batch failures."""

from engram.api.lambda_runtime import instrument, worker_handler

handler = instrument("worker", worker_handler(), http=False)
