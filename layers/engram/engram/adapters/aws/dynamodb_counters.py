"""Counters on the records' DynamoDB table (`PK = "_counter#{name}"`, `SK = "-"`), apart from every record's key.
An `add` is one conditional UpdateItem: it adds only while the value stays within the limit (or the counter
expired: then it starts again), so concurrent Lambda instances never both take the last unit. Expired counters
leave through the table's TTL attribute (`ttl`).

A counter that never expires (a running total: stored bytes) is added to in one transaction with a marker of the
call (`_counted#{token}`, kept a day), under the call's `ClientRequestToken`: the SDK's retry after a lost answer
finds the marker and is answered as counted, so the total never drifts. A counter that expires counts requests in
its window; a lost answer's retry may count one twice there, and the window ends it."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from engram.kernel.errors import Unavailable

PREFIX, COUNTED = "_counter#", "_counted#"
IN_PROGRESS_TRIES = 6  # as the records' transactions (`dynamodb_records`)
CONFLICT_TRIES = 8  # transactions of other callers on the same counter at the same moment
_CONFLICT = object()


class DynamoCounters:
    def __init__(self, client: Any, table: str) -> None:
        self._db, self._table = client, table

    def _key(self, name: str) -> dict[str, Any]:
        return {"PK": {"S": PREFIX + name}, "SK": {"S": "-"}}

    def add(self, name: str, amount: int, limit: int | None, expires_at: datetime | None, now: datetime) -> int | None:
        if expires_at is None:
            return self._add_total(name, amount, limit, now)
        stamp = int(now.timestamp())
        ttl = {":ttl": {"N": str(int(expires_at.timestamp()))}} if expires_at is not None else {}
        # 1. a live counter: add within the limit
        live = "attribute_exists(v) AND (attribute_not_exists(#t) OR #t > :now)"
        condition = live + (" AND v <= :room" if limit is not None and amount > 0 else "")
        values: dict[str, Any] = {":a": {"N": str(amount)}, ":now": {"N": str(stamp)}}
        if limit is not None and amount > 0:
            values[":room"] = {"N": str(limit - amount)}
        try:
            answer = self._db.update_item(
                TableName=self._table, Key=self._key(name), UpdateExpression="ADD v :a",
                ConditionExpression=condition, ExpressionAttributeNames={"#t": "ttl"},
                ExpressionAttributeValues=values, ReturnValues="UPDATED_NEW",
            )  # fmt: skip
            return max(int(answer["Attributes"]["v"]["N"]), 0)
        except self._db.exceptions.ConditionalCheckFailedException:
            pass
        # 2. missing or expired: start again from `amount` (unless the amount alone is over the limit)
        if limit is not None and amount > limit:
            return None
        start = max(amount, 0)
        try:
            self._db.update_item(
                TableName=self._table, Key=self._key(name),
                UpdateExpression="SET v = :s" + (", #t = :ttl" if ttl else " REMOVE #t"),
                ConditionExpression="attribute_not_exists(v) OR (attribute_exists(#t) AND #t <= :now)",
                ExpressionAttributeNames={"#t": "ttl"},
                ExpressionAttributeValues={":s": {"N": str(start)}, ":now": {"N": str(stamp)}, **ttl},
            )  # fmt: skip
            return start
        except self._db.exceptions.ConditionalCheckFailedException:
            pass
        # 3. someone else made it meanwhile: a live counter again, or the limit is reached
        if self.value(name, now) + amount > (limit if limit is not None else 2**62):
            return None
        return self.add(name, amount, limit, expires_at, now)

    def _add_total(self, name: str, amount: int, limit: int | None, now: datetime) -> int | None:
        if limit is not None and amount > limit:
            return None
        for attempt in range(CONFLICT_TRIES):
            outcome = self._add_once(name, amount, limit, now)
            if outcome is not _CONFLICT:
                return outcome if isinstance(outcome, int) else None
            time.sleep(0.02 * 2**attempt)  # another transaction held the counter: nothing was written, try anew
        raise Unavailable("the counter is busy: retry")

    def _add_once(self, name: str, amount: int, limit: int | None, now: datetime) -> int | object | None:
        token = uuid.uuid4().hex
        kept = str(int((now + timedelta(days=1)).timestamp()))
        marker = {"PK": {"S": COUNTED + token}, "SK": {"S": "-"}, "ttl": {"N": kept}}
        update: dict[str, Any] = {"TableName": self._table, "Key": self._key(name), "UpdateExpression": "ADD v :a",
                                  "ExpressionAttributeValues": {":a": {"N": str(amount)}}}  # fmt: skip
        if limit is not None and amount > 0:
            update["ConditionExpression"] = "attribute_not_exists(v) OR v <= :room"
            update["ExpressionAttributeValues"][":room"] = {"N": str(limit - amount)}
        ops = [{"Put": {"TableName": self._table, "Item": marker, "ConditionExpression": "attribute_not_exists(PK)"}},
               {"Update": update}]  # fmt: skip
        for attempt in range(IN_PROGRESS_TRIES):
            try:
                self._db.transact_write_items(TransactItems=ops, ClientRequestToken=token)
                return self.value(name, now)
            except self._db.exceptions.TransactionInProgressException:
                time.sleep(0.05 * 2**attempt)  # a retry met its first attempt still running: ask again, same token
            except self._db.exceptions.TransactionCanceledException as exc:
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if reasons[:1] == ["ConditionalCheckFailed"]:
                    return self.value(name, now)  # the marker is there: the first attempt counted, its answer was lost
                if reasons[1:2] == ["ConditionalCheckFailed"]:
                    return None  # over the limit: refused, unchanged
                if "TransactionConflict" in reasons:
                    return _CONFLICT
                raise
        raise Unavailable("the counter's outcome is not known yet")

    def value(self, name: str, now: datetime) -> int:
        got = self._db.get_item(TableName=self._table, Key=self._key(name), ConsistentRead=True).get("Item")
        if got is None or ("ttl" in got and int(got["ttl"]["N"]) <= int(now.timestamp())):
            return 0
        return max(int(got["v"]["N"]), 0)
