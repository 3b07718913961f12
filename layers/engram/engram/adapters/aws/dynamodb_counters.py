"""Counters on the records' DynamoDB table (`PK = "_counter#{name}"`, `SK = "-"`), apart from every record's key.
An `add` is one conditional UpdateItem: it adds only while the value stays within the limit (or the counter
expired: then it starts again), so concurrent Lambda instances never both take the last unit. Expired counters
leave through the table's TTL attribute (`ttl`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

PREFIX = "_counter#"


class DynamoCounters:
    def __init__(self, client: Any, table: str) -> None:
        self._db, self._table = client, table

    def _key(self, name: str) -> dict[str, Any]:
        return {"PK": {"S": PREFIX + name}, "SK": {"S": "-"}}

    def add(self, name: str, amount: int, limit: int | None, expires_at: datetime | None, now: datetime) -> int | None:
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

    def value(self, name: str, now: datetime) -> int:
        got = self._db.get_item(TableName=self._table, Key=self._key(name), ConsistentRead=True).get("Item")
        if got is None or ("ttl" in got and int(got["ttl"]["N"]) <= int(now.timestamp())):
            return 0
        return max(int(got["v"]["N"]), 0)
