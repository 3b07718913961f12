"""AuditLog on the records' DynamoDB table: a context's log is one partition (`PK = "_audit#{context}"`,
`SK` = the sequence number, zero-padded), apart from every record's key (a record's PK starts with its
context id, which never starts with `_`). An entry expires through the table's TTL attribute (`ttl`). The
context's high-water mark is another item (`PK = "_auditmark#{context}"`), written in the same transaction as
each entry, so removing the log's items leaves the mark that names its last entry.

Appends from many Lambda instances are serialised by the key: an entry is put on the condition that its
sequence number is free; a writer that loses reads the partition's last entry and chains to it instead. Each
process keeps the last entry it knows per context, so a warm instance appends in one request; a cold one reads the
head in a thread of its own while the call runs (`prime`), so the read costs no time of the call's."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from engram.kernel.clock import iso, parse_time
from engram.kernel.ports import AuditEntry, AuditMark, Sealer

PREFIX = "_audit#"
MARK_PREFIX = "_auditmark#"
MAX_TRIES = 50
Head = tuple[int, str, datetime | None]  # the last entry known: seq, hash, expiry


def _sk(seq: int) -> str:
    return f"{seq:016d}"


def _expiry(raw: dict[str, Any]) -> datetime | None:
    return datetime.fromtimestamp(int(raw["ttl"]["N"]), UTC) if "ttl" in raw else None


def _mark(context_id: str, raw: dict[str, Any]) -> AuditMark:
    expires = parse_time(raw["expires_at"]["S"]) if "expires_at" in raw else None
    return AuditMark(context_id, int(raw["seq"]["N"]), raw["hash"]["S"], expires, raw["mac"]["S"])


def _head(raw: dict[str, Any] | None) -> Head | None:
    """The head a mark's raw item names (None: no mark; the newest entry is read instead)."""
    if raw is None:
        return None
    mark = _mark("", raw)
    return mark.seq, mark.hash, mark.expires_at


class DynamoAuditLog:
    def __init__(self, client: Any, table: str) -> None:
        self._db, self._table = client, table
        self._heads: dict[str, Head] = {}
        self._reading: dict[str, Future[Head]] = {}
        self._lock = threading.Lock()

    def prime(self, context_id: str, marked: Callable[[], dict[str, Any] | None] | None = None) -> None:
        """Start reading the chain's head in a thread; `marked`: how to get the mark's raw item (one read of
        several made together, `engram.adapters.aws.dynamodb_primer`), else it is read alone."""
        with self._lock:
            if context_id in self._heads or context_id in self._reading:
                return
            future: Future[Head] = Future()
            self._reading[context_id] = future
        threading.Thread(target=self._read_head, args=(context_id, future, marked), daemon=True).start()

    def wants_head(self, context_id: str) -> bool:
        """Whether an append here would read the head first (this process knows none, and reads none yet)."""
        with self._lock:
            return context_id not in self._heads and context_id not in self._reading

    def _read_head(
        self, context_id: str, future: Future[Head], marked: Callable[[], dict[str, Any] | None] | None
    ) -> None:
        try:
            # the mark read with other items, or alone; no mark: the newest entry (a log kept before marks)
            future.set_result(self._last(context_id) if marked is None else _head(marked()) or self._newest(context_id))
        except BaseException as exc:  # the append reads it again itself
            future.set_exception(exc)

    @staticmethod
    def mark_key(context_id: str) -> dict[str, Any]:
        return {"PK": {"S": MARK_PREFIX + context_id}, "SK": {"S": "MARK"}}

    def _entry(self, context_id: str, raw: dict[str, Any]) -> AuditEntry:
        at = parse_time(raw["at"]["S"])
        assert at is not None
        data = json.loads(raw["data"]["S"])
        return AuditEntry(context_id, int(raw["SK"]["S"]), at, data, raw["prev"]["S"], raw["hash"]["S"])

    def _last(self, context_id: str) -> Head:
        # The mark is written in the transaction of every entry, so it names the head: one item read. A log
        # kept before marks existed has none: its newest entry is the head.
        mark = self.mark(context_id)
        if mark is not None:
            return mark.seq, mark.hash, mark.expires_at
        return self._newest(context_id)

    def _newest(self, context_id: str) -> Head:
        page = self._db.query(
            TableName=self._table,
            KeyConditionExpression="PK = :p",
            ExpressionAttributeValues={":p": {"S": PREFIX + context_id}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        items = page.get("Items", [])
        if items:
            return int(items[0]["SK"]["S"]), items[0]["hash"]["S"], _expiry(items[0])
        return 0, "", None

    def _holds(self, item: dict[str, Any], digest: str) -> bool:
        key = {"PK": item["PK"], "SK": item["SK"]}
        got = self._db.get_item(TableName=self._table, Key=key, ConsistentRead=True, ProjectionExpression="#h",
                                ExpressionAttributeNames={"#h": "hash"})  # fmt: skip
        return bool(got.get("Item", {}).get("hash", {}).get("S") == digest)

    def append(
        self, context_id: str, data: dict[str, Any], now: datetime, expires_at: datetime | None, sealer: Sealer
    ) -> AuditEntry:
        with self._lock:
            head = self._heads.get(context_id)
            reading = self._reading.pop(context_id, None)
        if head is None and reading is not None:
            try:
                head = reading.result(timeout=30)
            except Exception:
                head = None
        if head is None:
            head = self._last(context_id)
        for _ in range(MAX_TRIES):
            seq, prev = head[0] + 1, head[1]
            stored, digest = sealer.entry(context_id, seq, now, data, prev, head[2])
            item = {
                "PK": {"S": PREFIX + context_id},
                "SK": {"S": _sk(seq)},
                "at": {"S": iso(now) or ""},
                "data": {"S": json.dumps(stored)},
                "prev": {"S": prev},
                "hash": {"S": digest},
            }
            mark = {
                "PK": {"S": MARK_PREFIX + context_id},
                "SK": {"S": "MARK"},
                "seq": {"N": str(seq)},
                "hash": {"S": digest},
                "mac": {"S": sealer.mark(context_id, seq, digest, expires_at)},
            }
            if expires_at is not None:
                item["ttl"] = {"N": str(int(expires_at.timestamp()))}
                mark["expires_at"] = {"S": iso(expires_at) or ""}
            writes = [
                {"Put": {"TableName": self._table, "Item": item, "ConditionExpression": "attribute_not_exists(SK)"}},
                {"Put": {"TableName": self._table, "Item": mark,
                         "ConditionExpression": "attribute_not_exists(seq) OR seq < :s",
                         "ExpressionAttributeValues": {":s": {"N": str(seq)}}}},
            ]  # fmt: skip
            try:  # the token: an SDK retry of a transaction whose answer was lost is the same transaction
                self._db.transact_write_items(TransactItems=writes, ClientRequestToken=digest[-36:])
            except self._db.exceptions.TransactionCanceledException:
                # Taken: by another writer (chain to what is there now), or by our own first attempt
                if not self._holds(item, digest):
                    head = self._last(context_id)
                    continue
            with self._lock:
                self._heads[context_id] = (seq, digest, expires_at)
            return AuditEntry(context_id, seq, now, stored, prev, digest)
        raise RuntimeError(f"audit log of {context_id!r}: no free sequence number after {MAX_TRIES} tries")

    def mark(self, context_id: str) -> AuditMark | None:
        got = self._db.get_item(TableName=self._table, Key=self.mark_key(context_id), ConsistentRead=True).get("Item")
        return _mark(context_id, got) if got is not None else None

    def entries(
        self,
        context_id: str,
        after: int = 0,
        before: int | None = None,
        limit: int = 1000,
        descending: bool = False,
        now: datetime | None = None,
    ) -> list[AuditEntry]:
        hi = before - 1 if before is not None else 10**16 - 1
        if limit <= 0 or hi <= after:
            return []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "PK = :p AND SK BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":p": {"S": PREFIX + context_id},
                ":lo": {"S": _sk(after + 1)},
                ":hi": {"S": _sk(hi)},
            },
            "ScanIndexForward": not descending,
            "ConsistentRead": True,
        }
        out: list[AuditEntry] = []
        moment = int(now.timestamp()) if now is not None else None
        while len(out) < limit:
            page = self._db.query(**kwargs, Limit=limit - len(out))
            for raw in page.get("Items", []):
                if moment is not None and "ttl" in raw and int(raw["ttl"]["N"]) <= moment:
                    continue  # expired, not yet swept by DynamoDB
                out.append(self._entry(context_id, raw))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return out[:limit]
