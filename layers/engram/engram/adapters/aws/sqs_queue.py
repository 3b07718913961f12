"""Queue on Amazon SQS: a job is one message `{"job": name, "payload": {...}}`.

On AWS the ingest worker function receives the messages from SQS and calls `handle_batch`, which
reports the failed message ids for partial batch responses. `join` (tests, CLI) drains the queue
in this process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from engram.queue import Handlers, Payload


class SqsQueue(Handlers):
    def __init__(self, client: Any, queue_url: str) -> None:
        super().__init__()
        self._sqs = client
        self._url = queue_url

    def submit(self, name: str, payload: Payload) -> None:
        self.check(name, payload)
        self._sqs.send_message(QueueUrl=self._url, MessageBody=json.dumps({"job": name, "payload": payload}))

    def handle_batch(self, records: Iterable[dict[str, Any]]) -> list[str]:
        """Run the jobs of SQS records (Lambda event shape); returns the ids of the ones that failed."""
        failed: list[str] = []
        for record in records:
            try:
                message = json.loads(record["body"])
                self.check(message["job"], message["payload"])
                self._handlers[message["job"]](message["payload"])
            except Exception:
                failed.append(record["messageId"])
        return failed

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
