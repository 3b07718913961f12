"""Queue on Amazon SQS: a job is one message `{"job": name, "payload": {...}, "id": job record id}`.

With a record store, a job is first a record (engram.kernel.queue: committed with the write that needs it) and
then a message; the worker deletes the record once the job has run. Records whose message never went
(a crash right after the commit) are sent again by `recover`.

On AWS the ingest worker function receives the messages from SQS and calls `handle_batch`, which
reports the failed message ids for partial batch responses. `join` (tests, CLI) drains the queue
in this process.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from engram.kernel.clock import parse_time
from engram.kernel.errors import EngramError
from engram.kernel.ports import RecordStore, Write, scan
from engram.kernel.queue import BLOB_CREATED_JOB, JOBS, LEASE, Handlers, Payload, job_write

log = logging.getLogger("engram.kernel.queue")
MAX_DELAY = 900  # seconds: the most SQS delays a message


def decode(body: str) -> tuple[str, Payload, str | None]:
    """The job a message carries (name, payload, job record id): one of ours, or an S3 "Object Created"
    event from EventBridge."""
    message = json.loads(body)
    if message.get("source") == "aws.s3" and message.get("detail-type") == "Object Created":
        found = message["detail"]["object"]
        return BLOB_CREATED_JOB, {"key": found["key"], "etag": found.get("etag", ""), "size": found.get("size")}, None
    return message["job"], message["payload"], message.get("id")


class SqsQueue(Handlers):
    def __init__(self, client: Any, queue_url: str, records: RecordStore | None = None) -> None:
        super().__init__()
        self._sqs = client
        self._url = queue_url
        self._records = records

    def job(self, name: str, payload: Payload, now: datetime, delay: timedelta | None = None) -> Write:
        self.check(name, payload)
        return job_write(name, payload, now, delay)

    def done(self, job: Write) -> None:
        self._done([job.id])

    def _send(self, name: str, payload: Payload, job_id: str | None, due: datetime | None = None) -> None:
        """One message; a job not due yet is delayed until it is (SQS delays a message by 15 minutes at most:
        one due later is held again by `handle_batch` until its time)."""
        body = {"job": name, "payload": payload} | ({"id": job_id} if job_id else {})
        wait = 0 if due is None else math.ceil((due - datetime.now(UTC)).total_seconds())
        extra = {"DelaySeconds": min(MAX_DELAY, wait)} if wait > 0 else {}
        self._sqs.send_message(QueueUrl=self._url, MessageBody=json.dumps(body), **extra)

    def started(self, jobs: Sequence[Write]) -> None:
        """The jobs' records are committed with their write, which is therefore done: a message that cannot
        be sent now is logged, not raised (the write would answer as failed, and its caller undo what it
        made for it), and `recover` sends it from its record."""
        for w in jobs:
            try:
                self._send(w.data["name"], w.data["payload"], w.id, parse_time(w.data.get("due")))
            except Exception:
                if self._records is None:
                    raise
                log.exception("job %s (%s) is committed, its message not sent: recovery sends it", w.id,
                              w.data["name"])  # fmt: skip

    def submit(self, name: str, payload: Payload) -> None:
        self.check(name, payload)
        if self._records is None:
            self._send(name, payload, None)
            return
        now = datetime.now(UTC)
        write = self.job(name, payload, now)
        self._records.transact([write], now)
        self.started([write])

    def recover(self, older_than: timedelta = LEASE) -> int:
        """Send again the jobs due for longer than `older_than` (their message may never have gone, or
        they are safety nets whose writer died). A job that runs twice is harmless: handlers check
        versions. Returns how many were sent."""
        if self._records is None:
            return 0
        cutoff = datetime.now(UTC) - older_than
        sent = 0
        for item in scan(self._records, JOBS, "job"):
            due = parse_time(item.data.get("due"))
            if item.data["status"] != "failed" and due is not None and due < cutoff:
                self._send(item.data["name"], item.data["payload"], item.id)
                sent += 1
        return sent

    def _done(self, job_ids: Iterable[str | None]) -> None:
        if self._records is not None:
            for job_id in job_ids:
                if job_id:
                    self._records.purge(JOBS, "job", job_id)

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
        job_ids: dict[str, str | None] = {}
        for record in records:
            try:
                name, payload, job_id = decode(record["body"])
                self.check(name, payload)
                if not self._runnable(name, payload, job_id):
                    continue  # withdrawn by its writer (it did the work), or held until it is due
                decoded.append((record["messageId"], name, payload))
                job_ids[record["messageId"]] = job_id
            except Exception:
                log.exception("message %s is not a job; it will be retried", record.get("messageId"))
                failed.append(record["messageId"])
        for positions in self.runs([name for _, name, _ in decoded]):  # a batchable job's run goes together
            run = [decoded[i] for i in positions]
            ids = [m for m, _, _ in run]
            try:
                self.dispatch(run[0][1], [p for _, _, p in run])
                self._done(job_ids[m] for m in ids)
            except EngramError as exc:
                log.error("job of messages %s failed for good: %s", ids, exc.message)
                self._done(job_ids[m] for m in ids)
            except Exception:
                log.exception("job of messages %s failed; it will be retried", ids)
                failed += ids
        order = {r.get("messageId"): n for n, r in enumerate(records)}
        return sorted(failed, key=lambda m: order.get(m, 0))

    def _runnable(self, name: str, payload: Payload, job_id: str | None) -> bool:
        """Whether a message's job is to run now: its record is still there (`done` withdraws it when the
        writer did the work itself), and it is due (a job due later than SQS can delay is sent again, delayed
        as far as SQS allows). A message without a record (an S3 event, a job submitted without a store) runs."""
        if job_id is None or self._records is None:
            return True
        item = self._records.get(JOBS, "job", job_id)
        if item is None or item.data.get("status") == "failed":
            return False
        due = parse_time(item.data.get("due"))
        if due is not None and due > datetime.now(UTC) + timedelta(seconds=1):
            self._send(name, payload, job_id, due)
            return False
        return True

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
