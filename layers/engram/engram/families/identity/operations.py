"""Identity family (the part the foundation needs): scope registration and the caller's identity."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engram.families.identity import IdentityServices
from engram.kernel.caller import ANY, MANAGEMENT, Caller
from engram.kernel.operation import Operation, Operations, OpInput, Scalar, Stamp
from engram.kernel.ports import Progress

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)


class ScopesIn(OpInput):
    paths: list[str] = Field(..., min_length=1, max_length=100, description="Scope paths to register")


class ScopesOut(BaseModel):
    registered: list[str]


def _scopes(services: IdentityServices, caller: Caller, args: ScopesIn, progress: Progress) -> dict[str, Any]:
    return {"registered": services.identity.register_scopes(caller.context_id, args.paths, caller.actor, caller=caller)}


OPERATIONS.declare(
    Operation(
        name="scopes_create",
        family="identity",
        summary="Register scope paths before first use.",
        input=ScopesIn,
        output=ScopesOut,
        principals=MANAGEMENT,
        method="POST",
        path="/scopes",
        run=_scopes,
    )
)


class IdentityOut(BaseModel):
    key_id: str
    principal: str
    context_id: str
    contexts: list[str]
    grant: list[str]
    receipt_public_key: str  # the Ed25519 key (base64url) erasure receipts are signed with


def _whoami(services: IdentityServices, caller: Caller, args: OpInput, progress: Progress) -> dict[str, Any]:
    pr = caller.principal
    return {
        "key_id": pr.key_id,
        "principal": pr.role,
        "context_id": caller.context_id,
        "contexts": list(pr.contexts),
        "grant": list(pr.grant),
        "receipt_public_key": services.erasure.public_key(),
    }


OPERATIONS.declare(
    Operation(
        name="current_identity",
        family="identity",
        summary="Who the calling key is: principal, contexts, grant.",
        input=OpInput,
        output=IdentityOut,
        principals=ANY,
        method="GET",
        path="/identity",
        run=_whoami,
        read_only=True,
    )
)


class PrincipalIn(OpInput):
    externalId: str | None = Field(None, min_length=1, max_length=256, description="your id of the principal")
    type: str | None = Field(None, max_length=64, description="user / org / client, or an identity schema")
    field: str | None = Field(None, max_length=64, description="a lookup field of that identity schema")
    value: Scalar | None = None

    @model_validator(mode="after")
    def _one_way(self) -> PrincipalIn:
        by_field = self.field is not None or self.value is not None
        if (self.externalId is not None) == by_field:
            raise ValueError("give externalId, or type + field + value")
        if by_field and (self.type is None or self.field is None or self.value is None):
            raise ValueError("a lookup by field takes type, field and value")
        return self


class PrincipalOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    type: str | None
    externalId: str | None
    path: str


def _principal(services: IdentityServices, caller: Caller, args: PrincipalIn, progress: Progress) -> dict[str, Any]:
    return services.principals.lookup(caller, args.externalId, args.type, args.field, args.value)


OPERATIONS.declare(
    Operation(
        name="lookup_principal",
        family="identity",
        summary="Resolve a user / org / client by your externalId or an identity lookup field, to its ownership id.",
        input=PrincipalIn,
        output=PrincipalOut,
        principals=ANY,
        method="POST",
        path="/principals/lookup",
        run=_principal,
        read_only=True,
    )
)


class AuditIn(OpInput):
    since: Stamp | None = Field(None, description="ISO 8601")
    until: Stamp | None = Field(None, description="ISO 8601")
    principal: str | None = Field(None, max_length=64, description="agent, supervisor or management")
    key_id: str | None = Field(None, max_length=128)
    tool: str | None = Field(None, max_length=128)
    object_id: str | None = Field(None, max_length=256)
    cursor: str | None = Field(None, max_length=32, description="next_cursor of the page before")
    limit: int = Field(100, ge=1, le=500)


class AuditEntryOut(BaseModel):
    seq: int
    at: str
    key_id: str
    principal: str
    tool: str
    transport: str
    objects: list[str]
    outcome: str
    code: str
    hash: str


class AuditOut(BaseModel):
    entries: list[AuditEntryOut]
    next_cursor: str | None
    scanned: int | None = Field(description="entries looked at (the context's manager only: null for a narrower one)")


def _audit(services: IdentityServices, caller: Caller, args: AuditIn, progress: Progress) -> dict[str, Any]:
    keys = services.identity.governed(caller)
    page = services.audit.query(
        caller.context_id,
        args.since,
        args.until,
        args.principal,
        args.key_id,
        args.tool,
        args.object_id,
        args.cursor,
        args.limit,
        keys,
    )
    if keys is not None:  # how many entries the page looked at counts everyone's calls
        page["scanned"] = None
    return page


OPERATIONS.declare(
    Operation(
        name="audit_query",
        family="identity",
        summary="The context's audit trail, newest first: who called which tool on which object ids, and the outcome.",
        input=AuditIn,
        output=AuditOut,
        principals=MANAGEMENT,
        method="GET",
        path="/audit",
        run=_audit,
        read_only=True,
    )
)


class VerifyOut(BaseModel):
    context_id: str
    ok: bool
    entries: int | None
    first: int | None
    last: int | None
    problems: list[dict[str, Any]]


def _verify(services: IdentityServices, caller: Caller, args: OpInput, progress: Progress) -> dict[str, Any]:
    report = services.audit.verify(caller.context_id)
    if not services.identity.governs(
        caller, None
    ):  # a narrower manager: whether the chain holds, not the context's volume
        found = (
            [{"problem": "the chain does not hold (the context's manager sees where)"}] if report["problems"] else []
        )
        report.update(entries=None, first=None, last=None, problems=found)
    return report


OPERATIONS.declare(
    Operation(
        name="audit_verify",
        family="identity",
        summary="Check the context's audit trail's hash chain: an entry edited, removed or inserted is reported.",
        input=OpInput,
        output=VerifyOut,
        principals=MANAGEMENT,
        method="GET",
        path="/audit/verify",
        run=_verify,
        read_only=True,
    )
)


class SubjectIn(OpInput):
    scope: str | None = Field(None, max_length=256, description="a scope path: it and everything under it")
    externalId: str | None = Field(None, min_length=1, max_length=256, description="a principal, by your id")
    ids: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        None, min_length=1, max_length=1000, description="objects by id"
    )


class ErasureIn(SubjectIn):
    preview: bool = Field(False, description="count what would be erased, per store and kind; erase nothing")


class ErasureOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    subject: dict[str, Any]
    found: dict[str, dict[str, dict[str, int]]]
    preview: bool


def _erase(services: IdentityServices, caller: Caller, args: ErasureIn, progress: Progress) -> dict[str, Any]:
    return services.erasure.request(
        caller, services.erasure.subject(caller, args.scope, args.externalId, args.ids), args.preview
    )


OPERATIONS.declare(
    Operation(
        name="erasure_request",
        family="identity",
        summary="Erase a subject (scope path or principal) everywhere, with a signed receipt; preview counts first.",
        input=ErasureIn,
        output=ErasureOut,
        principals=MANAGEMENT,
        method="POST",
        path="/erasures",
        run=_erase,
    )
)


class ExportIn(SubjectIn):
    cursor: str | None = Field(None, max_length=2048)
    limit: int = Field(100, ge=1, le=500)


class ExportOut(BaseModel):
    subject: dict[str, Any]
    objects: list[dict[str, Any]]
    cursor: str | None


def _export(services: IdentityServices, caller: Caller, args: ExportIn, progress: Progress) -> dict[str, Any]:
    return services.subject_access.export(
        caller, services.erasure.subject(caller, args.scope, args.externalId, args.ids), args.cursor, args.limit
    )


OPERATIONS.declare(
    Operation(
        name="subject_export",
        family="identity",
        summary="Everything a subject owns, as stored, by pages (what an erasure of it would take).",
        input=ExportIn,
        output=ExportOut,
        principals=MANAGEMENT,
        method="POST",
        path="/exports",
        run=_export,
        read_only=True,
    )
)


class ErasureIdIn(OpInput):
    request_id: str = Field(..., min_length=1, max_length=64)


class ErasureStatusOut(BaseModel):
    request_id: str
    subject: dict[str, Any]
    status: str
    requested_at: str
    erased: dict[str, dict[str, int]]
    receipt: dict[str, Any] | None
    verification: dict[str, Any] | None = None  # the last erasure_verify of it
    last_error: str | None = None  # why the last run did not finish (the job is tried again)


def _erasure_status(
    services: IdentityServices, caller: Caller, args: ErasureIdIn, progress: Progress
) -> dict[str, Any]:
    return services.erasure.status(caller, args.request_id)


OPERATIONS.declare(
    Operation(
        name="erasure_status",
        family="identity",
        summary="An erasure request's progress, and its signed receipt when it is done.",
        input=ErasureIdIn,
        output=ErasureStatusOut,
        principals=MANAGEMENT,
        method="GET",
        path="/erasures/status",
        run=_erasure_status,
        read_only=True,
    )
)


class ErasureVerifyOut(BaseModel):
    request_id: str
    checked_at: str
    remaining: dict[str, dict[str, dict[str, int]]]
    clean: bool
    receipt_valid: bool
    receipt_check: str


def _erasure_verify(
    services: IdentityServices, caller: Caller, args: ErasureIdIn, progress: Progress
) -> dict[str, Any]:
    return services.erasure.verify(caller, args.request_id)


OPERATIONS.declare(
    Operation(
        name="erasure_verify",
        family="identity",
        summary="Look again everywhere for a finished erasure's subject, and check its receipt's signature.",
        input=ErasureIdIn,
        output=ErasureVerifyOut,
        principals=MANAGEMENT,
        method="GET",
        path="/erasures/verify",
        run=_erasure_verify,
        read_only=True,
    )
)


from engram.families.identity import access_operations  # noqa: E402  (OAuth issuers, quotas, usage)

OPERATIONS.extend(access_operations.OPERATIONS)
