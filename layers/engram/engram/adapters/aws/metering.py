"""The AWS clients' share of a call's cost (`engram.kernel.metering`): the capacity units DynamoDB reports for each
request (asked for with `ReturnConsumedCapacity=TOTAL`), and each request sent to OpenSearch."""

from __future__ import annotations

from typing import Any

from engram.kernel.metering import charge

_READS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}
_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


def _ask(params: dict[str, Any], model: Any, **_: Any) -> None:
    if model.name in _READS or model.name in _WRITES:
        params.setdefault("ReturnConsumedCapacity", "TOTAL")


def _units(parsed: dict[str, Any], model: Any, **_: Any) -> None:
    consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
    if consumed is None:
        return
    total = sum(float(c.get("CapacityUnits", 0)) for c in (consumed if isinstance(consumed, list) else [consumed]))
    charge("read_units" if model.name in _READS else "write_units", total)


def meter_dynamodb(client: Any) -> Any:
    """Register the hooks on a boto3 DynamoDB client (returned, for chaining)."""
    client.meta.events.register("provide-client-params.dynamodb.*", _ask)
    client.meta.events.register("after-call.dynamodb.*", _units)
    return client


def meter_opensearch(client: Any) -> Any:
    """Count each request an opensearch-py client sends."""
    transport = client.transport
    send = transport.perform_request

    def perform_request(*args: Any, **kwargs: Any) -> Any:
        charge("opensearch_requests")
        return send(*args, **kwargs)

    transport.perform_request = perform_request
    return client
