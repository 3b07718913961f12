"""Settings, read once from the environment (prefix ENGRAM_) into a validated model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from engram.trust.quotas import QuotaLimits


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENGRAM_", extra="ignore")

    data_dir: Path = Field(Path(".engram"), description="Where the embedded stores keep their files")
    host: str = "127.0.0.1"
    port: int = 8000
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Extra Host header values MCP accepts (DNS-rebinding guard)"
    )
    dns_rebinding_protection: bool = Field(
        True,
        description="Refuse MCP requests whose Host is not allowed. Off behind API Gateway, which routes only "
        "its own domain names",
    )
    mcp_tools: str = Field("", description="Comma-separated tool names or families to expose; empty = all")
    mcp_response: Literal["auto", "json", "sse"] = Field(
        "auto",
        description="MCP POST answers: plain JSON, an SSE stream, or auto (SSE only when the request asks for "
        "progress with a progressToken; JSON is ~2.5 ms faster)",
    )
    mcp_fast_path: bool = Field(
        True,
        description="Answer a plain stateless tools/call (JSON, handshake-era version) without the SDK's "
        "per-request session: the same checks and answers, ~0.6 ms sooner (engram.api.mcp_fast)",
    )
    huge_pages: bool = Field(
        True,
        description="engram serve/stdio on Linux start once more with glibc's malloc asking for transparent "
        "huge pages (GLIBC_TUNABLES): a query embedding ~1 ms sooner, the same vectors",
    )
    mcp_output_schemas: bool = Field(
        False,
        description="Advertise each tool's output schema in tools/list (structured results are returned "
        "either way; the schemas cost about a third of the catalogue's tokens)",
    )
    call_slots: int = Field(
        0,
        ge=0,
        le=1024,
        description="Calls run at once (0: two a core); when all run, the next slot goes to a waiting call of the "
        "context running the fewest, so one tenant's burst queues behind itself, and a context with no call running "
        "or waiting starts its call at once, up to twice the slots; while several contexts have calls, each runs at "
        "most its share (the slots over twice their number, at least one), and a read of a context with calls waiting "
        "gives way (at points where it holds no lock, up to 100 ms in all) while a call of a context with none waiting "
        "runs "
        "(engram.trust.fair)",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="`engram serve`'s server processes on its one port (each its own copy of the contexts it serves: "
        "memory times the workers); more than one uses every core where one process's interpreter cannot, the "
        "fair share between contexts kept across them (engram.cli.workers, engram.trust.peers)",
    )
    max_request_bytes: int = Field(32 * 1024 * 1024, description="Largest request body (uploads are base64)")
    ingest_root: Path | None = Field(None, description="stdio document_ingest filePath jail (default: cwd)")
    token_budget: int = Field(2000, description="Causantic tools' response budget (tokens)")
    embedder: Literal["minilm", "minilm-int8", "bedrock", "none"] = Field(
        "minilm",
        description="minilm: all-MiniLM-L6-v2 on ONNX Runtime; minilm-int8: the same weights with int8 activations "
        "(38 % more documents embedded a second, a query ~2 ms sooner; vectors within cosine ~0.99, "
        "rankings within noise but not the same: bench/RESULTS.md, #25); bedrock: Titan; none: keyword search only",
    )
    extractor: Literal["learned", "rules"] = Field(
        "learned",
        description="How memory's writes read names and relations: learned (heads on the token states of the pass "
        "that embeds each turn, beside the rules: CoNLL04 entity F1 0.86, relation F1 0.63; ~1.5 ms a turn), or "
        "rules alone (0.67 / 0.18). An embedder without token states (bedrock, none) always reads by the rules",
    )
    bedrock_embedding_model_id: str = "amazon.titan-embed-text-v2:0"
    generator: Literal["none", "bedrock"] = "none"
    bedrock_model_id: str = "anthropic.claude-3-5-haiku-20241022-v1:0"
    aws_region: str = "us-east-1"
    # Which adapters `engram.wiring.build` picks: the embedded ones, or the AWS ones.
    backend: Literal["local", "aws"] = "local"
    table: str = Field("engram", description="DynamoDB table (backend aws)")
    bucket: str = Field("engram-documents", description="S3 bucket (backend aws)")
    opensearch_url: str = Field("", description="OpenSearch endpoint (backend aws)")
    opensearch_index: str = "engram-search"
    opensearch_service: Literal["es", "aoss", "none"] = Field(
        "es", description="SigV4 signing: es (managed domain), aoss (Serverless), none (a local node)"
    )
    opensearch_refresh: Literal["true", "wait_for", "false"] = Field(
        "true",
        description="How an OpenSearch write becomes searchable before it returns: refresh at once (true), "
        "wait for the next scheduled refresh (wait_for, up to 1 s), or not (false); Serverless: always false",
    )
    queue_url: str = Field("", description="SQS queue of background jobs (backend aws); empty: in process")
    family_functions: dict[str, str] = Field(
        default_factory=dict,
        description="The AWS gateway's map of tool family -> Lambda function that runs its tools/call",
    )
    public_url: str = Field(
        "",
        description="This deployment's public base URL (https://engram.example.com): the resource its protected "
        "resource metadata names and 401 answers point to; empty: from each request's Host header",
    )
    oauth_allowed_issuers: list[str] = Field(
        default_factory=list,
        description="OAuth issuers a management key may trust (oauth_trust): issuer URLs, or origins; the server "
        "fetches their keys, so a key never picks where it connects. The CLI (the operator) trusts any",
    )
    oauth_authorization_servers: list[str] = Field(
        default_factory=list,
        description="Authorization servers the protected resource metadata names; empty: every issuer a context "
        "trusts (engram oauth trust)",
    )
    quota_context: QuotaLimits = Field(
        default_factory=QuotaLimits,
        description='Default quotas of every context, JSON: {"requests_per_minute": 6000, "writes_per_day": '
        '100000, "stored_bytes": 1000000000, "embeddings_per_day": 100000}; unset: no limit',
    )
    quota_key: QuotaLimits = Field(
        default_factory=QuotaLimits, description="Default quotas of every key (or token principal) in a context"
    )
    # stdio: the key and default context come from the environment
    api_key: str | None = None
    context: str | None = None
    recall_cache_size: int = 512
    audit: bool = Field(True, description="Keep each context's audit trail (every call: who, what, which objects)")
    audit_retention_days: int = Field(
        365, ge=0, description="How long an audit entry is kept (0: for ever); DynamoDB's TTL removes it on AWS"
    )
    audit_key: SecretStr | None = Field(
        None,
        description="The audit chain's HMAC key (base64 of 32 bytes or more), kept where the deployment keeps "
        "secrets: apart from the log, so whoever can edit the log cannot re-seal it; unset: one made on first use "
        "and kept in the record store",
    )
    queue_worker: bool = Field(
        True,
        description="Run queued jobs (embeddings, retirements) in this process, including those other processes "
        "on the same data folder left behind; off: they run only when something calls `queue.join()`",
    )

    def tool_filter(self) -> set[str] | None:
        names = {t.strip() for t in self.mcp_tools.split(",") if t.strip()}
        return names or None
