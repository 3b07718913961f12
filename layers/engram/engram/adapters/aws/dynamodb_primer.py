"""A cold instance's first reads in one request (#49: after a restore, the first request within twice a warm one).

Every call reads its quotas (two records) and appends to its context's audit chain, which needs the chain's head
(the mark: one item). A warm instance has both cached; a cold one read them as two requests in flight at once
(`Quotas.prime`, `DynamoAuditLog.prime`) — two round trips where DynamoDB is busy or an emulator answers one
request at a time. They are items of one table, so here they are one BatchGetItem: each reader's prime is handed
the same single read, made by whichever asks first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from engram.adapters.aws.dynamodb_audit import DynamoAuditLog
from engram.adapters.aws.dynamodb_records import DynamoRecordStore
from engram.kernel.ports import Item
from engram.trust.quotas import QUOTA, SYSTEM, Quotas

Read = tuple[dict[str, Item], list[dict[str, Any]]]


class DynamoPrimer:
    def __init__(self, records: DynamoRecordStore, audit: DynamoAuditLog | None) -> None:
        self.records, self.audit = records, audit

    def prime(self, quotas: Quotas, context_id: str, key_id: str) -> None:
        qids = quotas.ids(context_id, key_id)
        marks = [DynamoAuditLog.mark_key(context_id)] if self.audit and self.audit.wants_head(context_id) else []
        read = _once(lambda: self.records.read_together(SYSTEM, QUOTA, qids, marks))
        quotas.prime(context_id, key_id, read=lambda _: read()[0])
        if self.audit is not None and marks:
            self.audit.prime(context_id, marked=lambda: next(iter(read()[1]), None))


def _once(read: Callable[[], Read]) -> Callable[[], Read]:
    """`read`, made at most once whoever asks first; the others wait for its answer (or its error)."""
    lock, done = threading.Lock(), list[Read]()
    failed: list[BaseException] = []

    def call() -> Read:
        with lock:
            if not done and not failed:
                try:
                    done.append(read())
                except BaseException as exc:
                    failed.append(exc)
        if failed:
            raise failed[0]
        return done[0]

    return call
