"""`engram admin bootstrap` against a stack's resources (moto + OpenSearch), and reading a stack's outputs."""

from __future__ import annotations

import uuid

import boto3
import httpx
import pytest
from botocore.stub import Stubber

from engram.adapters.aws.stack import stack_settings
from engram.cli import main as cli
from engram.settings import Settings
from engram.wiring import build_identity
from tests import stack
from tests.conftest import Aws

pytestmark = [pytest.mark.aws, pytest.mark.opensearch]


def test_bootstrap_creates_the_index_and_a_working_management_key(
    aws: Aws, opensearch: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"boot-{uuid.uuid4().hex[:8]}"

    stack.table(name)  # as template.yaml defines it (tests.stack)
    for key, value in {
        "ENGRAM_BACKEND": "aws",
        "ENGRAM_TABLE": name,
        "ENGRAM_BUCKET": name,
        "ENGRAM_OPENSEARCH_URL": opensearch,
        "ENGRAM_OPENSEARCH_SERVICE": "none",
        "ENGRAM_OPENSEARCH_INDEX": name,
    }.items():
        monkeypatch.setenv(key, value)
    assert httpx.head(f"{opensearch}/{name}").status_code == 404
    code = cli.main(["admin", "bootstrap", "--context", "acme-prod", "--grant", "org/acme", "--scope", "org/acme/team"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert httpx.head(f"{opensearch}/{name}").status_code == 200
    mapping = httpx.get(f"{opensearch}/{name}/_mapping").json()[name]["mappings"]["properties"]
    assert mapping["vector"]["type"] == "knn_vector"
    principal = build_identity(Settings()).authenticate(out[-1])
    assert principal.role == "management" and principal.contexts == ("acme-prod",)
    assert "org/acme/team" in build_identity(Settings()).registered("acme-prod")


@pytest.mark.parametrize(
    ("provider", "embedder"), [("local", "minilm"), ("local-int8", "minilm-int8"), ("bedrock", "bedrock")]
)
def test_stack_outputs_become_settings(provider: str, embedder: str) -> None:
    client = boto3.client("cloudformation", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    outputs = {
        "TableName": "engram-staging",
        "BucketName": "engram-staging-documents",
        "QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/jobs",
        "OpenSearchUrl": "https://abc.us-east-1.aoss.amazonaws.com",
        "OpenSearchService": "aoss",
        "EmbeddingProvider": provider,
        "McpUrl": "https://a1.execute-api.us-east-1.amazonaws.com/mcp",
    }
    stub = Stubber(client)
    stub.add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": "engram-staging",
                    "CreationTime": "2026-11-26T00:00:00Z",
                    "StackStatus": "CREATE_COMPLETE",
                    "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
                }
            ]
        },
        {"StackName": "engram-staging"},
    )
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": "x", "CreationTime": "2026-11-26T00:00:00Z", "StackStatus": "CREATE_COMPLETE"}]},
        {"StackName": "x"},
    )
    with stub:
        found = stack_settings(client, "engram-staging")
        with pytest.raises(ValueError, match="is it an Engram stack"):
            stack_settings(client, "x")
    assert found == {
        "backend": "aws",
        "table": "engram-staging",
        "bucket": "engram-staging-documents",
        "queue_url": "https://sqs.us-east-1.amazonaws.com/1/jobs",
        "opensearch_url": "https://abc.us-east-1.aoss.amazonaws.com",
        "opensearch_service": "aoss",
        "embedder": embedder,
        "mcp_url": "https://a1.execute-api.us-east-1.amazonaws.com/mcp",
    }
    Settings(**{k: v for k, v in found.items() if k != "mcp_url"})  # every key is a setting
