"""Who is calling: a principal (a key or a token's subject: its role, contexts and grant) acting in one context,
and the roles. The kernel's part of identity: operations and services take a `Caller`; issuing and checking keys
and tokens is `engram.trust.identity`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from engram.kernel.errors import Forbidden, InvalidInput
from engram.kernel.observability import deny

Role = Literal["agent", "supervisor", "management"]
ROLES: tuple[Role, ...] = get_args(Role)
ANY: frozenset[Role] = frozenset(ROLES)
WRITERS: frozenset[Role] = frozenset({"agent", "management"})
OVERSEERS: frozenset[Role] = frozenset({"supervisor", "management"})
MANAGEMENT: frozenset[Role] = frozenset({"management"})

SYSTEM = "_system"  # the context keys live in; no key can be issued for it
_CONTEXT_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def check_context(context_id: str) -> str:
    if not context_id or len(context_id) > 64 or not set(context_id) <= _CONTEXT_CHARS:
        raise InvalidInput(f"invalid context id {context_id!r}: lowercase letters, digits, '-', '_', '.'")
    return context_id


@dataclass(frozen=True)
class Principal:
    key_id: str
    role: Role
    contexts: tuple[str, ...]
    grant: tuple[str, ...]


@dataclass(frozen=True)
class Caller:
    """An authenticated principal acting in one context."""

    principal: Principal
    context_id: str
    transport: str = "http"  # "stdio" where the caller is the local user (filePath ingest)

    @property
    def actor(self) -> str:
        return f"{self.principal.role}:{self.principal.key_id}"

    def denied(self, message: str, **fields: object) -> Forbidden:
        deny({"context_id": self.context_id, "key_id": self.principal.key_id, "role": self.principal.role, **fields})
        return Forbidden(message, code=str(fields.get("reason", "forbidden")))
