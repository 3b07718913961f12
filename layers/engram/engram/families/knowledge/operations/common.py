"""What the knowledge family's operations share: output base, a document id argument, metadata shapes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from engram.kernel.limits import Bounded
from engram.kernel.operation import (
    Metadata,
    OpInput,
    Passthrough,
    Scalar,
)

Meta = Metadata
MetaFilter = Annotated[dict[str, Scalar | Annotated[list[Scalar], Field(max_length=100)]], Bounded("filter")]
"""A metadata filter: each key's value, or any of a list of values (scalars: what metadata is matched on)."""
MAX_TEXT = 2_000_000
Strategy = Literal["fixed", "sentence", "paragraph", "semantic"]
SENSITIVE = (
    ".ssh",
    ".aws",
    ".gnupg",
    ".env",
    "id_rsa",
    "id_ed25519",
    "credentials",
    ".netrc",
    ".pem",
    ".key",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "shadow",
    "passwd",
)


class Out(Passthrough):
    """Outputs carry the service's dict through; the declared fields are the documented minimum."""

    traceId: str = ""


class DocIdIn(OpInput):
    id: str = Field(..., min_length=1, max_length=128)


def vectros_status(status: str) -> str:
    """A document's status as Vectros names it (`indexStatus`)."""
    return {"queued": "PENDING_INDEX", "indexed": "INDEXED", "failed": "FAILED"}.get(status, status.upper())
