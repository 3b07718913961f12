"""Settings of a deployed Engram stack, read from its CloudFormation outputs (`engram ... --stack NAME`)."""

from __future__ import annotations

from typing import Any

OUTPUTS = {  # stack output -> setting
    "TableName": "table",
    "BucketName": "bucket",
    "QueueUrl": "queue_url",
    "OpenSearchUrl": "opensearch_url",
    "OpenSearchService": "opensearch_service",
}


def stack_settings(client: Any, stack: str) -> dict[str, Any]:
    """The settings that point the AWS adapters at `stack`'s resources, plus its MCP URL."""
    found = client.describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
    missing = [k for k in OUTPUTS if k not in outputs]
    if missing:
        raise ValueError(f"stack {stack} has no output {', '.join(missing)}: is it an Engram stack?")
    settings: dict[str, Any] = {"backend": "aws", **{OUTPUTS[k]: outputs[k] for k in OUTPUTS}}
    provider = outputs.get("EmbeddingProvider")
    settings["embedder"] = {"bedrock": "bedrock", "local-int8": "minilm-int8"}.get(provider or "", "minilm")
    settings["mcp_url"] = outputs.get("McpUrl", "")
    return settings
