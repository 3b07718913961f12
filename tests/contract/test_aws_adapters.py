"""The AWS adapters against the same port contract suites, on a real AWS API emulator process."""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config

from engram.adapters.aws import dynamodb_records
from engram.adapters.aws.dynamodb_audit import PREFIX, DynamoAuditLog
from engram.adapters.aws.dynamodb_counters import DynamoCounters
from engram.adapters.aws.dynamodb_records import IN_PROGRESS_TRIES, MAX_WRITES, DynamoRecordStore
from engram.adapters.aws.s3_blobs import BlobsKept, S3BlobStore
from engram.kernel.errors import Conflict, InvalidInput, Unavailable
from engram.kernel.ports import Write
from engram.kernel.queue import Queue
from tests import stack
from tests.concurrency import together
from tests.conftest import Aws
from tests.contract.suites import CHAIN, T0, AuditLogContract, BlobStoreContract, QueueContract, RecordStoreContract
from tests.fixtures.lossy_proxy import lossy_proxy

pytestmark = pytest.mark.aws


def client(endpoint: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def dynamodb(aws: Aws) -> str:
    """moto's DynamoDB (LocalStack serves every other service here: tests.localstack)."""
    return aws.dynamodb


def dynamo_store(url: str) -> DynamoRecordStore:
    """A store on a table as template.yaml defines it (tests.stack), through `url`."""
    db = client(url, "dynamodb")
    return DynamoRecordStore(db, stack.table(db=db))


class TestDynamoRecordStore(RecordStoreContract):
    @pytest.fixture
    def store(self, dynamodb: str) -> DynamoRecordStore:
        return dynamo_store(dynamodb)

    def test_transactions_are_bounded(self, store: DynamoRecordStore) -> None:
        writes = [Write("c1", "x", f"i{i}", {}, "a") for i in range(MAX_WRITES + 1)]
        with pytest.raises(InvalidInput):
            store.transact(writes, T0)

    def test_an_item_holds_its_limit_in_wide_characters_and_any_text_reads_back(self, store: DynamoRecordStore) -> None:
        """Data is stored as UTF-8 (escaped, 300 KB of accented text was 900 KB: past the 400 KB item); text UTF-8
        cannot hold (a lone surrogate, which no argument may carry but a parsed file might) is escaped."""
        wide = {"v": "é" * 150_000, "e": "\U0001f600" * 1_000}
        odd = {"v": "a\ud800b"}
        store.transact([Write("c1", "x", "wide", wide, "a"), Write("c1", "x", "odd", odd, "a")], T0)
        assert store.get("c1", "x", "wide").data == wide  # type: ignore[union-attr]
        assert store.get("c1", "x", "odd").data == odd  # type: ignore[union-attr]

    def test_a_lost_answer_to_a_committed_transaction_is_neither_a_conflict_nor_a_second_write(
        self, dynamodb: str
    ) -> None:
        """DynamoDB (or the network) fails after the commit; the SDK retries. The retry meets its own first attempt's
        versions: before, a version conflict for the caller's own write, and a caller that retried wrote it again."""
        with lossy_proxy(dynamodb) as (url, proxy):
            store = dynamo_store(url)
            proxy.lose(".TransactWriteItems")
            first = store.transact([Write("c1", "rec", "r1", {"v": 1}, "alice", expected_version=0)], T0)
            assert proxy.lost == ["DynamoDB_20120810.TransactWriteItems"]
            assert first[0].version == 1
            proxy.lose(".TransactWriteItems")
            both = store.transact(
                [
                    Write("c1", "rec", "r1", {"v": 2}, "alice", expected_version=1),
                    Write("c1", "rec", "r2", {"v": 1}, "alice"),
                ],
                T0,
            )
            assert len(proxy.lost) == 2 and [w.version for w in both] == [2, 1]
            assert [i.version for i in store.history("c1", "rec", "r1")] == [1, 2]
            assert store.get("c1", "rec", "r1").data == {"v": 2}  # type: ignore[union-attr]
            # a writer that read before another's write still meets a conflict, lost answer or not
            seen = store._latest("c1", "rec", "r2")
            store.transact([Write("c1", "rec", "r2", {"v": 2}, "bob")], T0)
            proxy.lose(".TransactWriteItems")
            stale = DynamoRecordStore(client(url, "dynamodb"), store._table)
            stale._latest = lambda *a: seen  # type: ignore[method-assign]
            with pytest.raises(Conflict):
                stale.transact([Write("c1", "rec", "r2", {"v": 3}, "carol")], T0)
            assert store.get("c1", "rec", "r2").data == {"v": 2}  # type: ignore[union-attr]

    def test_a_retry_that_meets_its_first_attempt_still_running_asks_again_until_it_knows(self, dynamodb: str) -> None:
        """The answer is lost, the SDK's retry is told the transaction is in progress (DynamoDB's answer while the
        first attempt runs): before, that error went to the caller as a failure of a write that committed."""
        with lossy_proxy(dynamodb) as (url, proxy):
            # the SDK's own retries of it (standard mode treats it as throttling) run out after two attempts here
            db = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                              config=Config(retries={"mode": "standard", "max_attempts": 2}))  # fmt: skip
            store = DynamoRecordStore(db, dynamo_store(url)._table)
            proxy.plan(".TransactWriteItems", "lose", "busy", "busy")
            [item] = store.transact([Write("c1", "rec", "r1", {"v": 1}, "alice", expected_version=0)], T0)
            assert len(proxy.lost) == 3 and item.version == 1
            assert [i.version for i in store.history("c1", "rec", "r1")] == [1]
            proxy.plan(".TransactWriteItems", *["busy"] * 100)  # never known: a 503 that says so
            with pytest.raises(Unavailable):
                store.transact([Write("c1", "rec", "r2", {"v": 1}, "alice")], T0)
            asked = len(proxy.lost) - 3
            proxy.plan(".TransactWriteItems")
            assert store.get("c1", "rec", "r2") is None and asked % IN_PROGRESS_TRIES == 0  # each try, the SDK's asks

    def test_a_batch_read_dynamodb_is_too_busy_for_is_asked_again_and_never_read_as_missing(
        self, dynamodb: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Throttled keys come back unread; after its tries `get_many` returned what it had, so an item read as
        missing (a dedup or an ownership check passing wrongly): now a 503 that says so."""
        monkeypatch.setattr(dynamodb_records.time, "sleep", lambda _s: None)  # the backoff, not the behaviour
        with lossy_proxy(dynamodb) as (url, proxy):
            store = dynamo_store(url)
            store.transact([Write("c1", "rec", f"r{i}", {"v": i}, "a") for i in range(3)], T0)
            proxy.plan(".BatchGetItem", "unprocessed", "unprocessed")
            assert sorted(store.get_many("c1", "rec", ["r0", "r1", "r2"])) == ["r0", "r1", "r2"]
            proxy.plan(".BatchGetItem", *["unprocessed"] * 8)
            with pytest.raises(Unavailable):
                store.get_many("c1", "rec", ["r0", "r1"])


class TestS3BlobStore(BlobStoreContract):
    @pytest.fixture
    def blobs(self, endpoint: str, aws: Aws) -> S3BlobStore:
        return S3BlobStore(client(endpoint, "s3"), stack.bucket(aws.stack), prefix="blobs/")

    def test_erase_takes_every_version_of_a_versioned_bucket(self, endpoint: str, aws: Aws) -> None:
        """Issue #27: a delete on a versioned bucket (template.yaml's) only adds a marker; erase takes them all."""
        s3 = client(endpoint, "s3")
        bucket = stack.bucket(aws.stack)  # versioned, as the template says
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
        blobs = S3BlobStore(s3, bucket, prefix="blobs/")
        for n in range(3):
            blobs.put("ctx/doc/1", f"version {n}".encode())
        blobs.put("ctx/doc/10", b"keep")
        blobs.delete("ctx/doc/1")

        def versions(key: str) -> list[str]:
            page = s3.list_object_versions(Bucket=bucket, Prefix=key)
            return [v["VersionId"] for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
                    if v["Key"] == key]  # fmt: skip

        assert len(versions("blobs/ctx/doc/1")) == 4  # three versions and a delete marker: the bytes are there
        blobs.erase("ctx/doc/1")
        assert versions("blobs/ctx/doc/1") == [] and blobs.get("ctx/doc/10") == b"keep"

    def test_an_erasure_s3_refuses_in_part_says_so(self, endpoint: str) -> None:
        """A version under legal hold: S3 answers the batch delete with 200 and lists it as refused. That 200 was
        read as done, and the erasure signed a receipt for bytes still stored."""
        s3 = client(endpoint, "s3")
        bucket = f"engram-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
        blobs = S3BlobStore(s3, bucket, prefix="blobs/")
        blobs.put("ctx/doc/1", b"held")
        [held] = s3.list_object_versions(Bucket=bucket, Prefix="blobs/ctx/doc/1")["Versions"]
        s3.put_object_legal_hold(Bucket=bucket, Key="blobs/ctx/doc/1", VersionId=held["VersionId"],
                                 LegalHold={"Status": "ON"})  # fmt: skip
        blobs.put("ctx/doc/1", b"later")
        with pytest.raises(BlobsKept) as err:
            blobs.erase("ctx/doc/1")
        assert "AccessDenied" in str(err.value) and "blobs/ctx/doc/1" in str(err.value)
        s3.put_object_legal_hold(Bucket=bucket, Key="blobs/ctx/doc/1", VersionId=held["VersionId"],
                                 LegalHold={"Status": "OFF"})  # fmt: skip
        blobs.erase("ctx/doc/1")  # the job's next run finishes it
        assert not s3.list_object_versions(Bucket=bucket, Prefix="blobs/ctx/doc/1").get("Versions")

    def test_presigned_url_downloads_the_bytes(self, blobs: S3BlobStore) -> None:
        blobs.put("ctx/doc/1", b"presigned")
        url = blobs.url("ctx/doc/1", expires_in=60)
        assert url is not None and httpx.get(url).content == b"presigned"


def test_sqs_queue_carries_named_jobs_and_reports_failures(endpoint: str, aws: Aws) -> None:
    from engram.adapters.aws.sqs_queue import SqsQueue

    sqs = client(endpoint, "sqs")
    url = stack.queue(aws.stack)
    q = SqsQueue(sqs, url)
    seen: list[int] = []
    q.register("record", lambda p: seen.append(p["n"]))
    for n in range(3):
        q.submit("record", {"n": n})
    assert q.join() and sorted(seen) == [0, 1, 2]
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []
    with pytest.raises(KeyError):
        q.submit("unknown", {})
    failed = q.handle_batch(
        [
            {"messageId": "m1", "body": '{"job": "record", "payload": {}}'},
            {"messageId": "m2", "body": "not json"},
            {"messageId": "m3", "body": '{"job": "record", "payload": {"n": 9}}'},
        ]
    )
    assert failed == ["m1", "m2"] and seen[-1] == 9


def test_sqs_jobs_are_records_first_and_a_lost_message_is_recovered(
    endpoint: str, dynamodb: str, aws: Aws, tmp_path: object
) -> None:
    """The outbox: a job committed with its write but never sent (a crash in between) is sent again by
    `recover`, runs once, and its record goes."""
    from datetime import UTC, datetime, timedelta

    from engram.adapters.aws.sqs_queue import SqsQueue
    from engram.kernel.ports import Write
    from engram.kernel.queue import JOBS

    sqs = client(endpoint, "sqs")
    records = dynamo_store(dynamodb)
    url = stack.queue(aws.stack)
    q = SqsQueue(sqs, url, records)
    seen: list[int] = []
    q.register("record", lambda p: seen.append(p["n"]))
    q.submit("record", {"n": 1})  # committed and sent
    long_ago = datetime.now(UTC) - timedelta(minutes=10)
    lost = q.job("record", {"n": 2}, long_ago)
    records.transact([Write("acme", "doc", "d", {}, "t"), lost], long_ago)  # committed, never sent
    assert q.recover(timedelta(minutes=5)) == 1  # only the old one
    assert q.join() and sorted(seen) == [1, 2]
    assert [i for i in records.query(JOBS, "job").items] == []  # done jobs leave no record
    assert q.recover(timedelta(minutes=5)) == 0


class TestSqsQueue(QueueContract):
    @pytest.fixture
    def setup(self, endpoint: str, dynamodb: str, aws: Aws) -> tuple[Queue, DynamoRecordStore]:
        from engram.adapters.aws.sqs_queue import SqsQueue

        records = dynamo_store(dynamodb)
        return SqsQueue(client(endpoint, "sqs"), stack.queue(aws.stack), records), records


class TestDynamoAuditLog(AuditLogContract):
    @pytest.fixture
    def log(self, dynamodb: str) -> DynamoAuditLog:
        self.db = client(dynamodb, "dynamodb")
        self.table = stack.table(db=self.db)
        return DynamoAuditLog(self.db, self.table)

    def _key(self, context_id: str, seq: int) -> dict[str, Any]:
        return {"PK": {"S": PREFIX + context_id}, "SK": {"S": f"{seq:016d}"}}

    def alter(self, log: object, context_id: str, seq: int) -> None:
        self.db.update_item(TableName=self.table, Key=self._key(context_id, seq), UpdateExpression="SET #d = :d",
                            ExpressionAttributeNames={"#d": "data"},
                            ExpressionAttributeValues={":d": {"S": '{"tool": "forged"}'}})  # fmt: skip

    def remove(self, log: object, context_id: str, seq: int) -> None:
        self.db.delete_item(TableName=self.table, Key=self._key(context_id, seq))

    def rewrite(self, log: object, context_id: str, seq: int, data: dict[str, object], prev: str, hash: str) -> None:
        self.db.update_item(TableName=self.table, Key=self._key(context_id, seq),
                            UpdateExpression="SET #d = :d, #p = :p, #h = :h",
                            ExpressionAttributeNames={"#d": "data", "#p": "prev", "#h": "hash"},
                            ExpressionAttributeValues={":d": {"S": json.dumps(data)}, ":p": {"S": prev},
                                                       ":h": {"S": hash}})  # fmt: skip

    def test_a_lost_answer_to_an_append_writes_the_entry_once(self, dynamodb: str, log: DynamoAuditLog) -> None:
        """The put lands, its answer is lost, the SDK retries and meets the entry it wrote: before, the log chained
        a second copy of the entry after it."""
        with lossy_proxy(dynamodb) as (url, proxy):
            log = DynamoAuditLog(client(url, "dynamodb"), self.table)  # the same table, through the proxy
            log.append("c2", {"n": 1}, T0, None, CHAIN)
            proxy.lose(".TransactWriteItems")
            entry = log.append("c2", {"n": 2}, T0, None, CHAIN)
            assert proxy.lost == ["DynamoDB_20120810.TransactWriteItems"]
            assert entry.seq == 2
            got = log.entries("c2")
            assert [(e.seq, e.data["n"]) for e in got] == [(1, 1), (2, 2)] and got[1].hash == entry.hash

    def test_a_second_instance_chains_to_what_the_first_wrote(self, log: DynamoAuditLog) -> None:
        """Two Lambda instances, each with its own idea of the last entry: the one that is behind loses the
        condition on the key, reads the last entry and chains to it."""
        other = DynamoAuditLog(self.db, self.table)
        log.append("c1", {"n": 1}, T0, None, CHAIN)
        other.append("c1", {"n": 2}, T0, None, CHAIN)
        log.append("c1", {"n": 3}, T0, None, CHAIN)  # its head (1) is stale: it takes 3, chained to 2
        got = log.entries("c1")
        assert [(e.seq, e.data["n"]) for e in got] == [(1, 1), (2, 2), (3, 3)]
        assert got[2].prev == got[1].hash and got[1].prev == got[0].hash

    def test_a_cold_instance_reads_the_head_from_the_mark_or_from_a_log_kept_before_marks(
        self, log: DynamoAuditLog
    ) -> None:
        """A new instance's first append reads one item (the mark) for the head, primed while its call runs; a
        log written before marks existed has none, and its newest entry is the head."""
        for n in range(3):
            log.append("c1", {"n": n}, T0, None, CHAIN)
        cold = DynamoAuditLog(self.db, self.table)
        calls: list[str] = []
        self.db.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.append(model.name))
        cold.prime("c1")
        entry = cold.append("c1", {"n": 3}, T0, None, CHAIN)
        assert calls == ["GetItem", "TransactWriteItems"]  # no query, no conflict
        assert (entry.seq, entry.prev) == (4, log.entries("c1")[2].hash)
        legacy = DynamoAuditLog(self.db, self.table)
        legacy.append("c2", {"n": 0}, T0, None, CHAIN)
        self.db.delete_item(TableName=self.table, Key={"PK": {"S": "_auditmark#c2"}, "SK": {"S": "MARK"}})
        later = DynamoAuditLog(self.db, self.table).append("c2", {"n": 1}, T0, None, CHAIN)
        assert later.seq == 2 and later.prev == legacy.entries("c2")[0].hash


class TestDynamoCounters:
    """A running total (stored bytes) never expires: a lost answer's retry that counted twice would stay counted."""

    def test_a_lost_answer_to_a_running_total_counts_it_once(self, dynamodb: str) -> None:
        with lossy_proxy(dynamodb) as (url, proxy):
            counters = DynamoCounters(client(url, "dynamodb"), dynamo_store(url)._table)
            assert counters.add("c:t:bytes", 100, 1_000, None, T0) == 100
            proxy.lose(".TransactWriteItems")
            assert counters.add("c:t:bytes", 250, 1_000, None, T0) == 350
            assert proxy.lost == ["DynamoDB_20120810.TransactWriteItems"]  # before: 600, and the drift stayed
            proxy.lose(".TransactWriteItems")
            assert counters.add("c:t:bytes", -50, None, None, T0) == 300  # a refund, the same
            assert counters.add("c:t:bytes", 701, 1_000, None, T0) is None  # over the limit: refused, unchanged
            assert counters.add("c:t:bytes", 1_001, 1_000, None, T0) is None
            assert counters.value("c:t:bytes", T0) == 300
            proxy.plan(".TransactWriteItems", "lose", "busy")
            db = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                              config=Config(retries={"mode": "standard", "max_attempts": 2}))  # fmt: skip
            assert DynamoCounters(db, counters._table).add("c:t:bytes", 700, 1_000, None, T0) == 1_000
            assert counters.value("c:t:bytes", T0) == 1_000 and len(proxy.lost) == 4
            proxy.plan(".TransactWriteItems", "conflict", "conflict")  # others' transactions held it: nothing written
            assert counters.add("c:t:bytes", -400, None, None, T0) == 600 and len(proxy.lost) == 6

    def test_a_running_total_stays_exact_under_concurrent_writers(self, dynamodb: str) -> None:
        counters = DynamoCounters(client(dynamodb, "dynamodb"), dynamo_store(dynamodb)._table)
        got: list[int | None] = []
        errors = together(16, lambda i: got.append(counters.add("c:t:bytes", 10, 100, None, T0)))
        assert not errors and sum(1 for g in got if g is not None) == 10
        assert counters.value("c:t:bytes", T0) == 100
