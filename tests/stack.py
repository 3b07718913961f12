"""template.yaml's resources on the test engines (#51), so the AWS adapter suites run against what the template
defines, not against what test code thinks it defines.

- **Deployed by CloudFormation into LocalStack** (`deploy`): every resource of the template that is not a function
  and that LocalStack can make — the documents bucket (versioning, encryption, lifecycle, EventBridge
  notifications, its TLS-only policy), the jobs queue and its dead-letter queue (redrive), the queue's policy,
  the EventBridge rule from the bucket's inbox to the queue, the alarm topic, the log groups and the alarms that
  watch no function — with the template's own parameters, and resources that name a left-out one left out too.
  Left out, each for its reason: the functions, their layers and the HTTP API (LocalStack runs Lambda only in
  Docker, and HTTP APIs only in its paid edition: functions run in process behind API Gateway events,
  `tests.aws_lambda.apigw`); the DynamoDB table (LocalStack serves DynamoDB only through DynamoDB Local, whose
  licence this project may not take: `tests.localstack`); the OpenSearch domain and collection (the tests' own
  node serves the index, `tests.opensearch`).
- **Per test, made from the template's definitions**: `table()` creates a table on moto's DynamoDB from the
  template's `Table` properties (keys, attributes, the index, TTL, point-in-time recovery, encryption; not its
  stream, which nothing reads and which doubles a write's cost on moto);
  `bucket()` makes a bucket with the deployed bucket's configuration, read back from LocalStack; `queue()` a
  queue with the deployed queue's attributes and redrive to its dead-letter queue. A template that loses an
  index, renames a key or drops a redrive makes the suites fail.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import boto3
import yaml

ROOT = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
LEFT_OUT = {  # resource types not deployed into LocalStack, and why (the module's docstring)
    "AWS::Serverless::Function": "Lambda runs only in Docker there",
    "AWS::Serverless::LayerVersion": "layers of the functions",
    "AWS::Serverless::HttpApi": "HTTP APIs are in LocalStack's paid edition",
    "AWS::DynamoDB::Table": "DynamoDB there is DynamoDB Local, whose licence this project may not take",
    "AWS::OpenSearchService::Domain": "the tests' own OpenSearch node serves the index",
    "AWS::OpenSearchServerless::Collection": "the tests' own OpenSearch node serves the index",
    "AWS::OpenSearchServerless::SecurityPolicy": "the tests' own OpenSearch node serves the index",
    "AWS::OpenSearchServerless::AccessPolicy": "the tests' own OpenSearch node serves the index",
}


class _Long(yaml.SafeLoader):
    """YAML with CloudFormation's short tags read as the long form: `!Ref X` -> {"Ref": "X"}, `!Sub s` ->
    {"Fn::Sub": "s"}, `!GetAtt A.B` -> {"Fn::GetAtt": ["A", "B"]}."""


def _long(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}": value}


_Long.add_multi_constructor("!", _long)


@cache
def template() -> dict[str, Any]:
    """template.yaml with CloudFormation's intrinsic functions in their long form ({"Ref": ...})."""
    loaded: dict[str, Any] = yaml.load((ROOT / "template.yaml").read_text(), Loader=_Long)
    return loaded


def _names(value: Any) -> set[str]:
    """The resources and parameters `value` refers to (Ref, GetAtt, Sub's ${X} and ${X.Attr})."""
    import re

    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            return {value["Ref"]}
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return {target[0] if isinstance(target, list) else str(target).split(".")[0]}
        out: set[str] = set()
        for k, v in value.items():
            if k == "Fn::Sub":
                text = v[0] if isinstance(v, list) else v
                out |= {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
                if isinstance(v, list):
                    out |= _names(v[1])
            else:
                out |= _names(v)
        return out
    if isinstance(value, list):
        return {n for v in value for n in _names(v)}
    return set()


def deployable() -> tuple[dict[str, Any], dict[str, str]]:
    """The template of what LocalStack can make (no transform, no globals), and each left-out resource's reason."""
    source = template()
    resources = source["Resources"]
    gone = {name: LEFT_OUT[r["Type"]] for name, r in resources.items() if r["Type"] in LEFT_OUT}
    changed = True
    while changed:  # what names a left-out resource cannot be made without it
        changed = False
        for name, r in resources.items():
            if name not in gone and _names(r) & set(gone):
                gone[name] = "names " + ", ".join(sorted(_names(r) & set(gone)))
                changed = True
    kept = {n: r for n, r in resources.items() if n not in gone}
    outputs = {n: o for n, o in source.get("Outputs", {}).items() if not _names(o) & set(gone)}
    body = {k: v for k, v in source.items() if k not in ("Transform", "Globals", "Resources", "Outputs")}
    return body | {"Resources": kept, "Outputs": outputs}, gone


@dataclass(frozen=True)
class Deployed:
    name: str
    resources: dict[str, str]  # logical id -> physical id
    outputs: dict[str, str]
    left_out: dict[str, str]
    seconds: float  # the deployment's time


def deploy(stage: str = "dev") -> Deployed:
    """Deploy `deployable()` into the LocalStack `AWS_ENDPOINT_URL` names; wait until it is made."""
    cfn = boto3.client("cloudformation", region_name=REGION)
    body, gone = deployable()
    name = f"engram-{stage}-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(body), Parameters=[
        {"ParameterKey": "Stage", "ParameterValue": stage}])  # fmt: skip
    while True:
        status = cfn.describe_stacks(StackName=name)["Stacks"][0]
        if status["StackStatus"] == "CREATE_COMPLETE":
            break
        if not status["StackStatus"].endswith("IN_PROGRESS"):
            events = cfn.describe_stack_events(StackName=name)["StackEvents"]
            failed = [f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}" for e in events
                      if e["ResourceStatus"].endswith("FAILED")]  # fmt: skip
            raise RuntimeError(f"stack {name}: {status['StackStatus']}: {failed}")
        time.sleep(0.2)
    made = cfn.describe_stack_resources(StackName=name)["StackResources"]
    resources = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in made}
    _complete_bucket(resources["DocumentsBucket"], body["Resources"]["DocumentsBucket"]["Properties"])
    seconds = time.perf_counter() - started
    outputs = {o["OutputKey"]: o["OutputValue"] for o in status.get("Outputs", [])}
    return Deployed(name, resources, outputs, gone, round(seconds, 2))


def deployed(name: str) -> Deployed:
    """A stack `deploy` made before (another process's: the tests on Lambda's Python reuse the session's)."""
    cfn = boto3.client("cloudformation", region_name=REGION)
    status = cfn.describe_stacks(StackName=name)["Stacks"][0]
    made = cfn.describe_stack_resources(StackName=name)["StackResources"]
    resources = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in made}
    outputs = {o["OutputKey"]: o["OutputValue"] for o in status.get("Outputs", [])}
    return Deployed(name, resources, outputs, deployable()[1], 0.0)


# What LocalStack's CloudFormation makes of a bucket's properties (2026.3.0: notifications, versioning, CORS, object
# lock, tags, website) and what it leaves unmade, which is put here from the template's own values: encryption,
# the public access block, ownership and the lifecycle rules. A property in neither list fails the deployment.
_CFN_MAKES = {"BucketName", "NotificationConfiguration", "VersioningConfiguration", "CorsConfiguration",
              "ObjectLockConfiguration", "Tags", "WebsiteConfiguration"}  # fmt: skip


def _complete_bucket(name: str, props: dict[str, Any]) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    done = set(_CFN_MAKES)
    if "BucketEncryption" in props:
        rules = [{"ApplyServerSideEncryptionByDefault": r["ServerSideEncryptionByDefault"],
                  **({"BucketKeyEnabled": r["BucketKeyEnabled"]} if "BucketKeyEnabled" in r else {})}
                 for r in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]]  # fmt: skip
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
        done.add("BucketEncryption")
    if "PublicAccessBlockConfiguration" in props:
        s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"])
        done.add("PublicAccessBlockConfiguration")
    if "OwnershipControls" in props:
        s3.put_bucket_ownership_controls(Bucket=name, OwnershipControls=props["OwnershipControls"])
        done.add("OwnershipControls")
    if "LifecycleConfiguration" in props:
        rules = []
        for r in props["LifecycleConfiguration"]["Rules"]:
            rule: dict[str, Any] = {"ID": r["Id"], "Status": r["Status"], "Filter": {"Prefix": r.get("Prefix", "")}}
            if "ExpirationInDays" in r:
                rule["Expiration"] = {"Days": r["ExpirationInDays"]}
            for key in ("NoncurrentVersionExpiration", "AbortIncompleteMultipartUpload"):
                if key in r:
                    rule[key] = r[key]
            unknown = set(r) - {"Id", "Status", "Prefix", "ExpirationInDays", "NoncurrentVersionExpiration",
                                "AbortIncompleteMultipartUpload"}  # fmt: skip
            assert not unknown, f"lifecycle rule fields not put on the test bucket: {unknown}"
            rules.append(rule)
        s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": rules})
        done.add("LifecycleConfiguration")
    assert set(props) <= done, f"bucket properties neither LocalStack nor the tests make: {set(props) - done}"


# -- per test, from the template's definitions ------------------------------------------------------------------


def table_request(name: str, stream: bool = False) -> dict[str, Any]:
    """CreateTable's request for the template's `Table`, under `name` (a table's other settings: `table`). Its stream
    only when asked: no function reads it, and moto's stream bookkeeping doubles the cost of every write there."""
    props = template()["Resources"]["Table"]["Properties"]
    request: dict[str, Any] = {
        "TableName": name,
        "BillingMode": props["BillingMode"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "GlobalSecondaryIndexes": props.get("GlobalSecondaryIndexes", []),
        "SSESpecification": {"Enabled": bool(props.get("SSESpecification", {}).get("SSEEnabled"))},
    }
    if stream and props.get("StreamSpecification"):
        request["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    return request


def table(name: str | None = None, db: Any = None) -> str:
    """A table as the template defines it, on the DynamoDB `AWS_ENDPOINT_URL_DYNAMODB` names (moto), or `db`'s:
    its name."""
    name = name or f"engram-{uuid.uuid4().hex[:8]}"
    props = template()["Resources"]["Table"]["Properties"]
    db = db or boto3.client("dynamodb", region_name=REGION)
    db.create_table(**table_request(name))
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        db.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
    pitr = props.get("PointInTimeRecoverySpecification")
    if pitr:
        db.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification=pitr)
    return name


_BUCKET_SETTINGS = (  # what a bucket's configuration is read and written as: (get, put, the field both use)
    ("get_bucket_versioning", "put_bucket_versioning", "VersioningConfiguration", None),
    ("get_bucket_encryption", "put_bucket_encryption", "ServerSideEncryptionConfiguration",
     "ServerSideEncryptionConfiguration"),
    ("get_public_access_block", "put_public_access_block", "PublicAccessBlockConfiguration",
     "PublicAccessBlockConfiguration"),
    ("get_bucket_ownership_controls", "put_bucket_ownership_controls", "OwnershipControls", "OwnershipControls"),
    ("get_bucket_lifecycle_configuration", "put_bucket_lifecycle_configuration", "LifecycleConfiguration", None),
    ("get_bucket_notification_configuration", "put_bucket_notification_configuration", "NotificationConfiguration",
     None),
)  # fmt: skip


@cache
def bucket_settings(deployed: str) -> dict[str, Any]:
    """The deployed bucket's configuration, as LocalStack made it from the template (what `bucket` copies)."""
    s3 = boto3.client("s3", region_name=REGION)
    out: dict[str, Any] = {}
    for get, _, field, inner in _BUCKET_SETTINGS:
        answer = getattr(s3, get)(Bucket=deployed)
        answer.pop("ResponseMetadata", None)
        answer.pop("TransitionDefaultMinimumObjectSize", None)  # a parameter of its own in the put, not set here
        out[field] = answer[inner] if inner else answer
    return out


def bucket(stack: Deployed, name: str | None = None) -> str:
    """A bucket configured as the stack's documents bucket (LocalStack's S3): its name."""
    name = name or f"engram-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=name)
    for _, put, field, _ in _BUCKET_SETTINGS:
        getattr(s3, put)(Bucket=name, **{field: bucket_settings(stack.resources["DocumentsBucket"])[field]})
    return name


def queue(stack: Deployed, name: str | None = None) -> str:
    """A queue with the stack's jobs queue's attributes, its redrive to the stack's dead-letter queue: its URL."""
    sqs = boto3.client("sqs", region_name=REGION)
    attrs = sqs.get_queue_attributes(QueueUrl=stack.resources["JobsQueue"], AttributeNames=["All"])["Attributes"]
    keep = ("VisibilityTimeout", "RedrivePolicy", "SqsManagedSseEnabled", "MessageRetentionPeriod")
    url: str = sqs.create_queue(QueueName=name or f"engram-{uuid.uuid4().hex[:8]}",
                                Attributes={k: attrs[k] for k in keep if k in attrs})["QueueUrl"]  # fmt: skip
    return url


def resources_left_out() -> Iterator[tuple[str, str]]:
    yield from sorted(deployable()[1].items())


def resolve(value: Any, names: dict[str, Any]) -> Any:
    """`value` with CloudFormation's intrinsic functions evaluated: `Ref`/`GetAtt` from `names` (a resource's
    physical id, `X.Attr` an attribute) or a parameter's default, `Fn::If` by the template's conditions (parameters
    at their defaults), `Fn::Sub`, `Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`. A name neither given nor a
    parameter fails: whatever the template hands a function must be known here."""
    import re

    source = template()
    params = {k: str(p.get("Default", "")) for k, p in source.get("Parameters", {}).items()}
    known = {**params, "AWS::Region": REGION, "AWS::AccountId": "000000000000", "AWS::NoValue": None, **names}

    def ref(name: str) -> Any:
        if name not in known:
            raise KeyError(f"the template hands functions {name!r}, which the tests do not provide")
        return known[name]

    def condition(name: str) -> bool:
        return bool(resolve(source["Conditions"][name], names))

    if isinstance(value, list):
        return [resolve(v, names) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return ref(arg)
        if fn == "Fn::GetAtt":
            return ref(".".join(arg) if isinstance(arg, list) else arg)
        if fn == "Fn::If":
            return resolve(arg[1] if condition(arg[0]) else arg[2], names)
        if fn == "Condition":
            return condition(arg)
        if fn == "Fn::Equals":
            return resolve(arg[0], names) == resolve(arg[1], names)
        if fn == "Fn::Not":
            return not resolve(arg[0], names)
        if fn == "Fn::And":
            return all(resolve(a, names) for a in arg)
        if fn == "Fn::Or":
            return any(resolve(a, names) for a in arg)
        if fn == "Fn::Sub":
            text, extra = (arg[0], arg[1]) if isinstance(arg, list) else (arg, {})
            return re.sub(r"\$\{([^}!]+)\}", lambda m: str(extra.get(m.group(1)) or ref(m.group(1))), text)
    return {k: resolve(v, names) for k, v in value.items()}


def function_environment(names: dict[str, Any]) -> dict[str, str]:
    """The environment template.yaml's Globals give every function, its references resolved from `names`."""
    variables = template()["Globals"]["Function"]["Environment"]["Variables"]
    resolved = {k: resolve(v, names) for k, v in variables.items()}
    return {k: str(v) for k, v in resolved.items() if v is not None}
