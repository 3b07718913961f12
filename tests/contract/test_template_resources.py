"""template.yaml and the code agree (#51): the resources the template deploys (into LocalStack, `tests.stack`)
are the ones the adapters need, named and shaped as they expect, and wired to each other as the worker expects.
A template that loses an index, renames a key, drops a redrive or routes the inbox elsewhere fails here."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest

from engram.adapters.aws.dynamodb_records import DynamoRecordStore
from engram.adapters.aws.sqs_queue import SqsQueue
from engram.settings import Settings
from tests import stack
from tests.conftest import Aws

pytestmark = pytest.mark.aws


class Recorder:
    """A DynamoDB client that writes down the requests `DynamoRecordStore.create_table` makes."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        def call(**kwargs: Any) -> dict[str, Any]:
            self.calls[name] = kwargs
            return {}

        return call


def test_the_table_the_code_makes_is_the_templates() -> None:
    """`engram admin bootstrap` makes its table itself where none is deployed: the same keys, attributes and index
    as the template's, and TTL on the attribute the adapters write expiries to."""
    recorder = Recorder()
    DynamoRecordStore.create_table(recorder, "t")
    made, wanted = recorder.calls["create_table"], stack.table_request("t")
    for field in ("KeySchema", "AttributeDefinitions", "BillingMode"):
        assert sorted(map(json.dumps, made[field])) == sorted(map(json.dumps, wanted[field])), field
    assert made["GlobalSecondaryIndexes"] == wanted["GlobalSecondaryIndexes"]
    props = stack.template()["Resources"]["Table"]["Properties"]
    assert props["StreamSpecification"]["StreamViewType"] == "NEW_AND_OLD_IMAGES"  # the change feed, for a consumer
    assert stack.table_request("t", stream=True)["StreamSpecification"]["StreamEnabled"] is True
    ttl = props["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "ttl", "Enabled": True}  # the attribute dynamodb_records/audit write
    if "update_time_to_live" in recorder.calls:
        assert recorder.calls["update_time_to_live"]["TimeToLiveSpecification"] == ttl


def test_the_template_deploys_and_says_what_it_left_out(aws: Aws) -> None:
    made = aws.stack.resources
    assert {"DocumentsBucket", "JobsQueue", "JobsDeadLetterQueue", "InboxRule", "JobsQueuePolicy", "AlarmTopic",
            "DeadLettersAlarm", "DocumentsBucketPolicy"} <= set(made)  # fmt: skip
    reasons = dict(stack.resources_left_out())
    assert "DynamoDB Local" in reasons["Table"] and "Docker" in reasons["MemoryFunction"]
    assert not set(made) & set(reasons)


def test_the_jobs_queue_hands_failures_to_its_dead_letter_queue(aws: Aws) -> None:
    sqs = boto3.client("sqs", region_name=stack.REGION)
    attrs = sqs.get_queue_attributes(QueueUrl=aws.stack.resources["JobsQueue"], AttributeNames=["All"])["Attributes"]
    dead = sqs.get_queue_attributes(QueueUrl=aws.stack.resources["JobsDeadLetterQueue"],
                                    AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]  # fmt: skip
    redrive = json.loads(attrs["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dead and int(redrive["maxReceiveCount"]) >= 2
    worker = stack.template()["Resources"]["WorkerFunction"]["Properties"]
    # a message comes back only after the worker that took it has surely stopped (AWS: six times its timeout)
    assert int(attrs["VisibilityTimeout"]) >= 6 * int(worker.get("Timeout", 29))


def test_the_documents_bucket_is_as_the_template_says(aws: Aws) -> None:
    """Versioned (an erasure takes every version: `S3BlobStore.erase`), encrypted, private, telling EventBridge of
    new objects, and keeping inbox files only a week (the worker copies them on ingest)."""
    settings = stack.bucket_settings(aws.stack.resources["DocumentsBucket"])
    assert settings["VersioningConfiguration"]["Status"] == "Enabled"
    rule = settings["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
    assert all(settings["PublicAccessBlockConfiguration"].values())
    assert "EventBridgeConfiguration" in settings["NotificationConfiguration"]
    inbox = [r for r in settings["LifecycleConfiguration"]["Rules"] if r.get("Filter", {}).get("Prefix") == "inbox/"]
    assert inbox and inbox[0]["Expiration"]["Days"] >= 1


def test_every_variable_the_template_hands_a_function_is_a_setting() -> None:
    """A renamed setting (ENGRAM_TABLE -> ENGRAM_DYNAMODB_TABLE, say) would leave functions on their defaults."""
    fields = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}
    variables = set(stack.template()["Globals"]["Function"]["Environment"]["Variables"])
    for resource in stack.template()["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            variables |= set(resource["Properties"].get("Environment", {}).get("Variables", {}))
    engram = {v for v in variables if v.startswith("ENGRAM_")}
    assert engram and engram <= fields, engram - fields


def test_a_file_dropped_in_the_inbox_reaches_the_worker_through_the_templates_rule(aws: Aws) -> None:
    """S3 tells EventBridge, the template's rule sends the event to the jobs queue, and the worker's queue reads it
    as the `blob.created` job (the path `engram ingest --stack` and S3 uploads take)."""
    s3, sqs = boto3.client("s3", region_name=stack.REGION), boto3.client("sqs", region_name=stack.REGION)
    url = aws.stack.resources["JobsQueue"]
    sqs.purge_queue(QueueUrl=url)
    key = f"inbox/acme/{time.time_ns()}.txt"
    s3.put_object(Bucket=aws.stack.resources["DocumentsBucket"], Key=key, Body=b"hello")
    s3.put_object(Bucket=aws.stack.resources["DocumentsBucket"], Key="blobs/elsewhere.txt", Body=b"not inbox")
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not seen:
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            seen.append({"messageId": m["MessageId"], "body": m["Body"]})
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert len(seen) == 1, seen
    event = json.loads(seen[0]["body"])
    assert event["detail-type"] == "Object Created" and event["detail"]["object"]["key"] == key
    queue = SqsQueue(sqs, url)
    ran: list[dict[str, Any]] = []
    queue.register("blob.created", ran.append)
    assert queue.handle_batch(seen) == [] and ran and key in json.dumps(ran[0])
