"""Identity family (the part the foundation needs): scope registration and the caller's identity."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engram.operations.registry import Operation, OpInput, declare
from engram.services.identity import ANY, MANAGEMENT, Caller
from engram.services.memory import Progress


class ScopesIn(OpInput):
    paths: list[str] = Field(..., min_length=1, max_length=100, description="Scope paths to register")


class ScopesOut(BaseModel):
    registered: list[str]


def _scopes(e: Any, c: Caller, a: ScopesIn, p: Progress) -> dict[str, Any]:
    return {"registered": e.identity.register_scopes(c.context_id, a.paths, c.actor, caller=c)}


declare(
    Operation(
        "scopes_create",
        "identity",
        "Register scope paths before first use.",
        ScopesIn,
        ScopesOut,
        MANAGEMENT,
        "POST",
        "/scopes",
        _scopes,
    )
)


class IdentityOut(BaseModel):
    key_id: str
    principal: str
    context_id: str
    contexts: list[str]
    grant: list[str]


def _whoami(e: Any, c: Caller, a: OpInput, p: Progress) -> dict[str, Any]:
    pr = c.principal
    return {
        "key_id": pr.key_id,
        "principal": pr.role,
        "context_id": c.context_id,
        "contexts": list(pr.contexts),
        "grant": list(pr.grant),
    }


declare(
    Operation(
        "current_identity",
        "identity",
        "Who the calling key is: principal, contexts, grant.",
        OpInput,
        IdentityOut,
        ANY,
        "GET",
        "/identity",
        _whoami,
        read_only=True,
    )
)
