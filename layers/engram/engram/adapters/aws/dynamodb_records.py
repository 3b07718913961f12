"""RecordStore on one DynamoDB table.

Layout: `PK = "{context}#{kind}#{id}"`; `SK = "LATEST"` holds the current version and `SK = "V#0000000042"`
every version. A query index (`GSI1`: `GSI1PK = "{context}#{kind}"`, `GSI1SK = id`) exists on LATEST
items only. One `TransactWriteItems` per `transact` call: each write puts LATEST under a version
condition and adds its `V#n` item, so concurrent writers never lose an update. `data` is stored as JSON
text (DynamoDB's number and empty-value rules would otherwise change what callers stored).
DynamoDB takes at most 100 items a transaction, so one `transact` holds at most 50 writes; larger
calls are refused rather than split, which would lose atomicity.

A transaction's outcome survives a lost answer: each carries a `ClientRequestToken` (so DynamoDB answers the SDK's
retry of a committed transaction with success for ten minutes), and every item it puts carries the same token as
`txn`. A retry refused because its own first attempt moved the versions (DynamoDB past the token's window, or an
emulator that keeps no tokens) is recognised by reading back one version item it wrote, and answered as committed:
a caller never sees a conflict for its own write, nor writes it again. A retry that meets its first attempt still
running (`TransactionInProgressException`) asks again with the same token until it knows.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

from engram.kernel.clock import iso, parse_time
from engram.kernel.errors import Conflict, InvalidInput, Unavailable
from engram.kernel.ports import Item, Page, Write

MAX_WRITES = 50
IN_PROGRESS_TRIES = 6  # asks of a transaction whose first attempt still runs (~1.6 s in all)
PARALLEL = 8  # requests at once for work item by item (the SDK client keeps 10 connections)
T = TypeVar("T")
R = TypeVar("R")


def _each(work: Callable[[T], R], items: list[T]) -> list[R]:
    """`work` of each item, in order, up to `PARALLEL` requests at once (an erasure's per-item reads and deletes: one
    at a time, 10,000 turns took minutes of round trips, past the worker's timeout)."""
    if len(items) < 2:
        return [work(i) for i in items]
    with ThreadPoolExecutor(min(PARALLEL, len(items))) as pool:
        return list(pool.map(work, items))


def _pk(context_id: str, kind: str, id_: str) -> str:
    return f"{context_id}#{kind}#{id_}"


def _version_sk(version: int) -> str:
    return f"V#{version:010d}"


def _encode(data: Any) -> str:
    """An item's data as compact JSON in UTF-8, as its limits count it: escaped to ASCII, a character outside it
    took 6 or 12 bytes (a 256 KiB context value of accented text, a 32,000-character message of emoji, went
    past DynamoDB's 400 KB item). Text no UTF-8 can hold (a lone surrogate) is escaped as before."""
    text = json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        return json.dumps(data, separators=(",", ":"), default=str)
    return text


def _latest_key(pk: str) -> dict[str, Any]:
    return {"PK": {"S": pk}, "SK": {"S": "LATEST"}}


def _at(version: int) -> dict[str, Any]:
    """The condition that an item's latest version is still `version` (0: that it does not exist)."""
    if version == 0:
        return {"ConditionExpression": "attribute_not_exists(PK)"}
    return {"ConditionExpression": "version = :v", "ExpressionAttributeValues": {":v": {"N": str(version)}}}


class DynamoRecordStore:
    max_writes = MAX_WRITES

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self._table = table

    @staticmethod
    def create_table(client: Any, table: str) -> None:
        """The table this adapter expects (template.yaml declares the same)."""
        client.create_table(
            TableName=table,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "GSI1PK", "GSI1SK")],
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "GSI1",
                    "KeySchema": [
                        {"AttributeName": "GSI1PK", "KeyType": "HASH"},
                        {"AttributeName": "GSI1SK", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )

    # -- mapping --------------------------------------------------------------------------

    @staticmethod
    def _item(raw: dict[str, Any]) -> Item:
        created, updated = parse_time(raw["created_at"]["S"]), parse_time(raw["updated_at"]["S"])
        assert created is not None and updated is not None
        expires = parse_time(raw["expires_at"]["S"]) if "expires_at" in raw else None
        return Item(
            raw["ctx"]["S"],
            raw["kind"]["S"],
            raw["id"]["S"],
            int(raw["version"]["N"]),
            json.loads(raw["data"]["S"]),
            raw["actor"]["S"],
            created,
            updated,
            expires,
        )

    @staticmethod
    def _live(item: Item | None, now: datetime | None) -> Item | None:
        if item is None or item.expires_at is None or item.expires_at > (now or datetime.now(UTC)):
            return item
        return None

    def _latest(self, context_id: str, kind: str, id_: str) -> dict[str, Any] | None:
        got = self._db.get_item(
            TableName=self._table,
            Key={"PK": {"S": _pk(context_id, kind, id_)}, "SK": {"S": "LATEST"}},
            ConsistentRead=True,
        )
        item: dict[str, Any] | None = got.get("Item")
        return item

    # -- port -----------------------------------------------------------------------------

    def get(self, context_id: str, kind: str, id: str, now: datetime | None = None) -> Item | None:
        raw = self._latest(context_id, kind, id)
        return self._live(self._item(raw) if raw else None, now)

    def transact(self, writes: Sequence[Write], now: datetime) -> list[Item]:
        if not writes:
            return []
        if len(writes) > MAX_WRITES:
            raise InvalidInput(f"at most {MAX_WRITES} writes in one transaction on DynamoDB", code="too_many_writes")
        stamp = iso(now)
        assert stamp is not None
        ops: list[dict[str, Any]] = []
        out: list[Item] = []
        txn = uuid.uuid4().hex
        mine: dict[str, Any] | None = None  # one version item this transaction puts: the proof it committed
        for w in writes:
            current = self._latest(w.context_id, w.kind, w.id)
            version = int(current["version"]["N"]) if current else 0
            if w.expected_version is not None and w.expected_version != version:
                raise Conflict(
                    f"{w.kind} {w.id!r} is at version {version}, expected {w.expected_version}",
                    code="version_conflict",
                )
            pk = _pk(w.context_id, w.kind, w.id)
            if w.check:
                ops.append({"ConditionCheck": {"TableName": self._table, "Key": _latest_key(pk), **_at(version)}})
                continue
            if w.remove:  # an item written once: its latest and its one version leave together
                if version:
                    ops.append({"Delete": {"TableName": self._table, "Key": _latest_key(pk), **_at(version)}})
                    key = {"PK": {"S": pk}, "SK": {"S": _version_sk(version)}}
                    ops.append({"Delete": {"TableName": self._table, "Key": key}})
                continue
            created = current["created_at"]["S"] if current else stamp
            attrs: dict[str, Any] = {
                "ctx": {"S": w.context_id},
                "kind": {"S": w.kind},
                "id": {"S": w.id},
                "version": {"N": str(version + 1)},
                "data": {"S": _encode(w.data)},
                "actor": {"S": w.actor},
                "created_at": {"S": created},
                "updated_at": {"S": stamp},
                "txn": {"S": txn},
            }
            if w.expires_at is not None:
                attrs["expires_at"] = {"S": iso(w.expires_at)}
                attrs["ttl"] = {"N": str(int(w.expires_at.timestamp()))}  # DynamoDB's own TTL sweeps later
            latest = {
                "PK": {"S": pk},
                "SK": {"S": "LATEST"},
                "GSI1PK": {"S": f"{w.context_id}#{w.kind}"},
                "GSI1SK": {"S": w.id},
                **attrs,
            }
            # The condition is on the version we read, so a concurrent writer makes this fail, not overwrite.
            ops.append({"Put": {"TableName": self._table, "Item": latest, **_at(version)}})
            version_key = {"PK": {"S": pk}, "SK": {"S": _version_sk(version + 1)}}
            mine = mine or version_key
            ops.append({"Put": {"TableName": self._table, "Item": {**version_key, **attrs}}})
            created_at = parse_time(created)
            assert created_at is not None
            out.append(
                Item(w.context_id, w.kind, w.id, version + 1, dict(w.data), w.actor, created_at, now, w.expires_at)
            )
        for attempt in range(IN_PROGRESS_TRIES):
            try:
                self._db.transact_write_items(TransactItems=ops, ClientRequestToken=txn)
                return out
            except self._db.exceptions.TransactionInProgressException:
                time.sleep(0.05 * 2**attempt)  # a retry met its first attempt still running: ask again, same token
            except self._db.exceptions.TransactionCanceledException as exc:
                if mine is not None and self._committed(mine, txn):
                    return out  # the answer to the first attempt was lost, and the SDK's retry met its own writes
                raise Conflict(
                    "a concurrent write changed an item; read it again and retry", code="version_conflict"
                ) from exc
        raise Unavailable("the write's outcome is not known yet: read the item before writing it again")

    def restore(self, context_id: str, objects: Sequence[Sequence[Item]]) -> int:
        """Each object on its own (a transaction holds 100 items; an object can have more versions): its version
        items first, then its LATEST under the condition that none exists — an object already here is left as it
        is, and one stopped half way (versions, no LATEST) is written again whole."""

        def one(versions: Sequence[Item]) -> int:
            last = versions[-1]
            pk = _pk(context_id, last.kind, last.id)
            if self._latest(context_id, last.kind, last.id) is not None:
                return 0

            def attrs(v: Item) -> dict[str, Any]:
                out = {"ctx": {"S": context_id}, "kind": {"S": v.kind}, "id": {"S": v.id},
                       "version": {"N": str(v.version)}, "data": {"S": _encode(v.data)}, "actor": {"S": v.actor},
                       "created_at": {"S": iso(versions[0].created_at)}, "updated_at": {"S": iso(v.updated_at)},
                       "txn": {"S": "restore"}}  # fmt: skip
                if v is last and v.expires_at is not None:
                    out["expires_at"] = {"S": iso(v.expires_at)}
                    out["ttl"] = {"N": str(int(v.expires_at.timestamp()))}
                return out

            puts = [{"PutRequest": {"Item": {"PK": {"S": pk}, "SK": {"S": _version_sk(v.version)}, **attrs(v)}}}
                    for v in versions]  # fmt: skip
            for i in range(0, len(puts), 25):
                self._batch_write(puts[i : i + 25])
            latest = {"PK": {"S": pk}, "SK": {"S": "LATEST"}, "GSI1PK": {"S": f"{context_id}#{last.kind}"},
                      "GSI1SK": {"S": last.id}, **attrs(last)}  # fmt: skip
            try:
                self._db.put_item(TableName=self._table, Item=latest, **_at(0))
            except self._db.exceptions.ConditionalCheckFailedException:
                return 0  # a writer made it meanwhile: theirs stands
            return 1

        return sum(_each(one, list(objects)))

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """One BatchWriteItem, asked again for what DynamoDB left unprocessed."""
        pending = {self._table: requests}
        for attempt in range(8):
            left = self._db.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
            if not left:
                return
            pending = left
            time.sleep(0.05 * 2**attempt)
        raise Unavailable("DynamoDB kept refusing a batch of writes: try again")

    def _committed(self, key: dict[str, Any], txn: str) -> bool:
        got = self._db.get_item(TableName=self._table, Key=key, ConsistentRead=True, ProjectionExpression="txn")
        return bool(got.get("Item", {}).get("txn", {}).get("S") == txn)

    def get_many(self, context_id: str, kind: str, ids: Sequence[str], now: datetime | None = None) -> dict[str, Item]:
        out: dict[str, Item] = {}
        wanted = list(dict.fromkeys(ids))
        for start in range(0, len(wanted), 100):  # BatchGetItem's limit
            for raw in self._batch_get([_latest_key(_pk(context_id, kind, i)) for i in wanted[start : start + 100]]):
                item = self._live(self._item(raw), now)
                if item is not None:
                    out[item.id] = item
        return out

    def read_together(
        self, context_id: str, kind: str, ids: Sequence[str], others: Sequence[dict[str, Any]]
    ) -> tuple[dict[str, Item], list[dict[str, Any]]]:
        """`get_many` of at most 99 ids and the raw items of `others` (other keys of this table: an audit mark)
        in one BatchGetItem: a cold call's first reads in one round trip (`engram.adapters.aws.dynamodb_primer`)."""
        keys = [_latest_key(_pk(context_id, kind, i)) for i in dict.fromkeys(ids)]
        assert len(keys) + len(others) <= 100
        items: dict[str, Item] = {}
        raws: list[dict[str, Any]] = []
        for raw in self._batch_get(keys + list(others)):
            if raw["SK"]["S"] == "LATEST" and raw["PK"]["S"].startswith(f"{context_id}#{kind}#"):
                item = self._live(self._item(raw), None)
                if item is not None:
                    items[item.id] = item
            else:
                raws.append(raw)
        return items, raws

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
        for attempt in range(8):
            got = self._db.batch_get_item(RequestItems=request)
            out += got.get("Responses", {}).get(self._table, [])
            request = got.get("UnprocessedKeys") or {}
            if not request:
                return out
            time.sleep(0.05 * 2**attempt)  # throttled: what was not read is asked again
        # still not read: an item is not missing because DynamoDB was busy
        raise Unavailable("DynamoDB is throttling reads: retry")

    def history_page(self, context_id: str, kind: str, id: str, before: int | None, limit: int) -> list[Item]:
        low, high = _version_sk(0), _version_sk(before - 1 if before is not None else 9_999_999_999)
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "PK = :pk AND SK BETWEEN :lo AND :hi",
            "ExpressionAttributeValues": {
                ":pk": {"S": _pk(context_id, kind, id)},
                ":lo": {"S": low},
                ":hi": {"S": high},
            },
            "ScanIndexForward": False,
            "ConsistentRead": True,
        }
        out: list[Item] = []
        while len(out) < limit:  # a query stops at a megabyte: large versions take several to make the page
            page = self._db.query(TableName=self._table, Limit=limit - len(out), **kwargs)
            out += [self._item(r) for r in page["Items"]]
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return out

    def history(self, context_id: str, kind: str, id: str) -> list[Item]:
        return [self._item(r) for page in self._versions(_pk(context_id, kind, id)) for r in page["Items"]]

    def _pages(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every page of one query."""
        while True:
            page = self._db.query(TableName=self._table, **kwargs)
            yield page
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _versions(self, pk: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every page of an item's version items (`V#n`), read consistently."""
        return self._pages(
            KeyConditionExpression="PK = :pk AND begins_with(SK, :v)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":v": {"S": "V#"}}, ConsistentRead=True, **kwargs,
        )  # fmt: skip

    def version_counts(self, context_id: str, kind: str, ids: Sequence[str]) -> dict[str, int]:
        def count(id_: str) -> int:
            return sum(p["Count"] for p in self._versions(_pk(context_id, kind, id_), Select="COUNT"))

        unique = list(dict.fromkeys(ids))
        return {i: n for i, n in zip(unique, _each(count, unique), strict=True) if n}

    def query(
        self,
        context_id: str,
        kind: str,
        *,
        prefix: str = "",
        limit: int = 100,
        cursor: str | None = None,
        descending: bool = False,
        now: datetime | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> Page:
        values: dict[str, Any] = {":p": {"S": f"{context_id}#{kind}"}}
        if start is not None or end is not None:  # a key range: the prefix narrows its ends
            low = max(prefix, start or "")
            high = min(prefix + "\U0010ffff", end) if end is not None else prefix + "\U0010ffff"
            condition = "GSI1PK = :p AND GSI1SK BETWEEN :lo AND :hi"
            values |= {":lo": {"S": low}, ":hi": {"S": high}}
        elif prefix:
            condition = "GSI1PK = :p AND begins_with(GSI1SK, :s)"
            values[":s"] = {"S": prefix}
        else:
            condition = "GSI1PK = :p"
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "GSI1",
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": not descending,
            "Limit": limit,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = _start_key(cursor, "GSI1PK", values[":p"])
        page = self._db.query(**kwargs)
        items = [i for i in (self._live(self._item(r), now) for r in page["Items"]) if i is not None]
        last = page.get("LastEvaluatedKey")
        return Page(items, base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None)

    def _keys(self, context_id: str, kind: str, prefix: str, now: datetime | None) -> Iterator[str]:
        """The live ids of a kind, in order: one query of the kind's index reading only each item's key and
        expiry, page by page."""
        values: dict[str, Any] = {":p": {"S": f"{context_id}#{kind}"}}
        condition = "GSI1PK = :p"
        if prefix:
            condition += " AND begins_with(GSI1SK, :s)"
            values[":s"] = {"S": prefix}
        kwargs: dict[str, Any] = {"TableName": self._table, "IndexName": "GSI1", "KeyConditionExpression": condition,
                                  "ExpressionAttributeValues": values,
                                  "ProjectionExpression": "GSI1SK, expires_at"}  # fmt: skip
        moment = now or datetime.now(UTC)
        while True:
            page = self._db.query(**kwargs)
            for raw in page["Items"]:
                expires = parse_time(raw["expires_at"]["S"]) if "expires_at" in raw else None
                if expires is None or expires > moment:
                    yield str(raw["GSI1SK"]["S"])
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def count(self, context_id: str, kind: str, prefix: str = "", now: datetime | None = None) -> int:
        return sum(1 for _ in self._keys(context_id, kind, prefix, now))

    def ids(
        self, context_id: str, kind: str, prefix: str = "", limit: int = 1000, now: datetime | None = None
    ) -> list[str]:
        return list(itertools.islice(self._keys(context_id, kind, prefix, now), max(0, limit)))

    def purge(self, context_id: str, kind: str, id: str) -> bool:
        return self.purge_many(context_id, kind, [id]) > 0

    def purge_many(self, context_id: str, kind: str, ids: Sequence[str]) -> int:
        """Each item's keys read (one query an item), then deleted together, 25 a batch."""

        def keys_of(id_: str) -> list[dict[str, Any]]:
            pages = self._pages(KeyConditionExpression="PK = :pk", ProjectionExpression="PK, SK",
                                ExpressionAttributeValues={":pk": {"S": _pk(context_id, kind, id_)}})  # fmt: skip
            return [{"PK": r["PK"], "SK": r["SK"]} for page in pages for r in page["Items"]]

        each = _each(keys_of, list(dict.fromkeys(ids)))
        self._delete([k for keys in each for k in keys])
        return sum(1 for keys in each if keys)

    def _delete(self, keys: list[dict[str, Any]]) -> None:
        """Every key deleted, 25 a batch (several batches at once), what DynamoDB left unprocessed sent again (with
        backoff)."""

        def batch(start: int) -> None:
            pending: list[dict[str, Any]] = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + 25]]
            for attempt in range(10):
                left = self._db.batch_write_item(RequestItems={self._table: pending}).get("UnprocessedItems", {})
                pending = left.get(self._table, [])
                if not pending:
                    return
                time.sleep(0.05 * 2**attempt)
            raise RuntimeError(f"DynamoDB left {len(pending)} deletes unprocessed after 10 tries")

        _each(batch, list(range(0, len(keys), 25)))

    def expunge(self) -> None:
        return None  # a DynamoDB delete is physical (point-in-time backups keep their window: docs/guides/erasure.md)

    def squash(self, context_id: str, kind: str, id: str) -> int:
        pk = _pk(context_id, kind, id)
        latest = self._db.get_item(
            TableName=self._table, Key={"PK": {"S": pk}, "SK": {"S": "LATEST"}}, ConsistentRead=True
        ).get("Item")
        keep = int(latest["version"]["N"]) if latest else 0
        keys = [
            {"PK": r["PK"], "SK": r["SK"]}
            for page in self._versions(pk, ProjectionExpression="PK, SK")
            for r in page["Items"]
            if int(r["SK"]["S"][2:]) < keep
        ]
        self._delete(keys)
        return len(keys)


def _start_key(cursor: str, partition: str, value: dict[str, str]) -> dict[str, dict[str, str]]:
    """The DynamoDB start key a cursor of this store carries, checked: string attributes only, and the very
    partition the query reads (a cursor naming another context's is not one this store gave)."""
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error, UnicodeError, RecursionError):
        key = None
    valid = (
        isinstance(key, dict)
        and 0 < len(key) <= 4
        and all(isinstance(v, dict) and list(v) == ["S"] and isinstance(v["S"], str) for v in key.values())
        and key.get(partition) == value
    )
    if not valid:
        raise InvalidInput("the cursor is not one this tool gave", code="invalid_cursor")
    return cast(dict[str, dict[str, str]], key)
