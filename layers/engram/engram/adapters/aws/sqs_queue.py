"""Queue on Amazon SQS: a job is one message `{"job": name, "payload": {...}}`.

On AWS the ingest worker function receives the messages from SQS and calls `handle_batch`, which
reports the failed message ids for partial batch responses. `join` (tests, CLI) drains the queue
in this process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from engram.errors import EngramError
from engram.queue import BLOB_CREATED_JOB, Handlers, Payload

log = logging.getLogger("engram.queue")


def decode(body: str) -> tuple[str, Payload]:
    """The job a message carries: one of ours, or an S3 "Object Created" event from EventBridge."""
    message = json.loads(body)
    if message.get("source") == "aws.s3" and message.get("detail-type") == "Object Created":
        found = message["detail"]["object"]
        return BLOB_CREATED_JOB, {"key": found["key"], "etag": found.get("etag", ""), "size": found.get("size")}
    return message["job"], message["payload"]


class SqsQueue(Handlers):
    def __init__(self, client: Any, queue_url: str) -> None:
        super().__init__()
        self._sqs = client
        self._url = queue_url

    def submit(self, name: str, payload: Payload) -> None:
        self.check(name, payload)
        self._sqs.send_message(QueueUrl=self._url, MessageBody=json.dumps({"job": name, "payload": payload}))

    def handle_batch(self, records: Iterable[dict[str, Any]]) -> list[str]:
        """Run the jobs of SQS records (Lambda event shape); returns the ids of the ones to retry.

        A message is a job `{"job", "payload"}` or an S3 "Object Created" event routed by EventBridge
        (the `blob.created` job). A job that fails with an EngramError (a corrupt file, an unregistered
        scope) would fail the same way again: it is logged and dropped. Any other failure is retried
        and, after the queue's receive limit, lands in the dead-letter queue.
        """
        records = list(records)
        failed: list[str] = []
        decoded: list[tuple[str, str, Payload]] = []  # (message id, job, payload)
        for record in records:
            try:
                name, payload = decode(record["body"])
                self.check(name, payload)
                decoded.append((record["messageId"], name, payload))
            except Exception:
                log.exception("message %s is not a job; it will be retried", record.get("messageId"))
                failed.append(record["messageId"])
        for positions in self.runs([name for _, name, _ in decoded]):  # a batchable job's run goes together
            run = [decoded[i] for i in positions]
            ids = [m for m, _, _ in run]
            try:
                self.dispatch(run[0][1], [p for _, _, p in run])
            except EngramError as exc:
                log.error("job of messages %s failed for good: %s", ids, exc.message)
            except Exception:
                log.exception("job of messages %s failed; it will be retried", ids)
                failed += ids
        order = {r.get("messageId"): n for n, r in enumerate(records)}
        return sorted(failed, key=lambda m: order.get(m, 0))

    def join(self, timeout: float | None = None) -> bool:
        """Receive and run until the queue is empty; failed messages stay for redelivery."""
        while True:
            got = self._sqs.receive_message(QueueUrl=self._url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = got.get("Messages", [])
            if not messages:
                return True
            records = [{"messageId": m["MessageId"], "body": m["Body"]} for m in messages]
            failed = set(self.handle_batch(records))
            for m in messages:
                if m["MessageId"] not in failed:
                    self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=m["ReceiptHandle"])
            if failed:
                return False
