"""Identity family, the deployment's access: OAuth issuers a context trusts, quotas, and what calls cost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engram.families.identity import IdentityServices
from engram.kernel.caller import MANAGEMENT, Caller
from engram.kernel.clock import iso, parse_time
from engram.kernel.errors import InvalidInput
from engram.kernel.operation import Operation, Operations, OpInput, Stamp
from engram.kernel.ports import Progress
from engram.trust.quotas import QuotaLimits

OPERATIONS = Operations()  # this module's operations, in declaration order (`engram.families.catalogue`)


class TrustIn(OpInput):
    issuer: str = Field(..., max_length=512)
    audience: list[str] = Field(..., min_length=1, max_length=10, description="this server's URLs")
    grant: list[str] = Field(..., min_length=1, max_length=20, description="the widest a token may carry")
    roles: list[str] = Field(["agent"], min_length=1, max_length=3)
    jwks_uri: str | None = Field(None, max_length=512)
    principal_claim: str = Field("sub", max_length=64)
    scope_claim: str = Field("scope", max_length=64)
    grant_template: str | None = Field(None, max_length=256, description="e.g. org/acme/user/{principal}")


class IssuerOut(BaseModel):
    issuer: str
    audience: list[str]
    grant: list[str]
    roles: list[str]
    jwks_uri: str | None
    principal_claim: str
    scope_claim: str
    grant_template: str | None


class IssuersOut(BaseModel):
    issuers: list[IssuerOut]


def _trust(services: IdentityServices, caller: Caller, args: TrustIn, progress: Progress) -> dict[str, Any]:
    allowed = services.root.settings.oauth_allowed_issuers
    policy = services.identity.trust_issuer(caller, args.model_dump(exclude={"context_id"}), allowed=allowed)
    return {"issuers": [policy.model_dump()]}


def _issuers(services: IdentityServices, caller: Caller, args: OpInput, progress: Progress) -> dict[str, Any]:
    return {"issuers": [i.model_dump() for i in services.identity.trusted(caller)]}


class DistrustIn(OpInput):
    issuer: str = Field(..., max_length=512)


def _distrust(services: IdentityServices, caller: Caller, args: DistrustIn, progress: Progress) -> dict[str, Any]:
    services.identity.distrust_issuer(caller, args.issuer)
    return _issuers(services, caller, args, progress)


OPERATIONS.declare(
    Operation(
        name="oauth_trust",
        family="identity",
        summary="Trust an OAuth issuer's access tokens here, up to a grant and roles.",
        input=TrustIn,
        output=IssuersOut,
        principals=MANAGEMENT,
        method="POST",
        path="/oauth/issuers",
        run=_trust,
    )
)
OPERATIONS.declare(
    Operation(
        name="oauth_issuers",
        family="identity",
        summary="The OAuth issuers trusted here, and for what.",
        input=OpInput,
        output=IssuersOut,
        principals=MANAGEMENT,
        method="GET",
        path="/oauth/issuers",
        run=_issuers,
        read_only=True,
    )
)
OPERATIONS.declare(
    Operation(
        name="oauth_distrust",
        family="identity",
        summary="Stop trusting an OAuth issuer's tokens here.",
        input=DistrustIn,
        output=IssuersOut,
        principals=MANAGEMENT,
        method="DELETE",
        path="/oauth/issuers",
        run=_distrust,
    )
)


class QuotaSetIn(OpInput):
    key_id: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_]+$",
    )
    # the upper bounds are QuotaLimits' (checked in _quota_set): numbers that large cost a catalogue tokens
    requests_per_minute: int | None = Field(None, ge=0)
    writes_per_day: int | None = Field(None, ge=0)
    stored_bytes: int | None = Field(None, ge=0)
    embeddings_per_day: int | None = Field(None, ge=0)


class QuotaUse(BaseModel):
    limit: int | None
    used: int | None


class QuotaOut(BaseModel):
    context_id: str
    key_id: str | None
    requests_per_minute: QuotaUse
    writes_per_day: QuotaUse
    stored_bytes: QuotaUse
    embeddings_per_day: QuotaUse


def _quota_out(services: IdentityServices, caller: Caller, key_id: str | None) -> dict[str, Any]:
    return {"context_id": caller.context_id, "key_id": key_id, **services.quotas.use(caller.context_id, key_id)}


def _quota_read(
    services: IdentityServices, caller: Caller, key_id: str | None, keys: frozenset[str] | None
) -> dict[str, Any]:
    """A key's quotas and use, of a key the caller governs (`keys`: `IdentityService.governed`); or the context's
    limits, with their use for its manager only — a narrower one would read the other regions' traffic in it
    (`used` null)."""
    if key_id is not None and keys is not None and key_id not in keys:
        _refuse(caller, key_id)
    out = _quota_out(services, caller, key_id)
    if key_id is None and keys is not None:
        out.update({k: dict(v, used=None) for k, v in out.items() if isinstance(v, dict)})
    return out


def _limiting(services: IdentityServices, caller: Caller, key_id: str | None) -> None:
    if not services.identity.may_limit(caller, key_id):
        if key_id is None:
            raise caller.denied(
                "the context's quotas bind every key of it, this one too: its operator sets them", reason="grant_denied"
            )
        raise caller.denied(
            "this key may set the quotas only of keys it governs with a narrower grant (never its own)",
            reason="grant_denied",
        )


def _refuse(caller: Caller, key_id: str | None) -> NoReturn:
    whose = "that key's" if key_id else "the whole context's (its grant holds only part of it)"
    raise caller.denied(f"this key does not govern {whose} quotas", reason="grant_denied")


def _quota_set(services: IdentityServices, caller: Caller, args: QuotaSetIn) -> dict[str, Any]:
    try:
        limits = QuotaLimits(**args.model_dump(include=set(QuotaLimits.model_fields)))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(f"invalid arguments: {first['loc'][0]}: {first['msg']}") from None
    _limiting(services, caller, args.key_id)
    services.quotas.set(caller.context_id, args.key_id, limits, caller.actor)
    return _quota_out(services, caller, args.key_id)


class QuotaGetIn(OpInput):
    key_id: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_]+$",
    )


OPERATIONS.declare(
    Operation(
        name="quota_set",
        family="identity",
        summary="Set the quotas of a key below this one (key_id); unset: the default. The context's: the operator's.",
        input=QuotaSetIn,
        output=QuotaOut,
        principals=MANAGEMENT,
        method="POST",
        path="/quotas",
        run=lambda services, caller, args, progress: _quota_set(services, caller, args),
    )
)
OPERATIONS.declare(
    Operation(
        name="quota_get",
        family="identity",
        summary="Quotas of this context (its use: its manager only) or of one key (key_id): limits and use now.",
        input=QuotaGetIn,
        output=QuotaOut,
        principals=MANAGEMENT,
        method="GET",
        path="/quotas",
        run=lambda services, caller, args, progress: _quota_read(
            services, caller, args.key_id, services.identity.governed(caller)
        ),
        read_only=True,
    )
)


class UsageIn(OpInput):
    since: Stamp | None = Field(None, description="ISO 8601; default 7 days ago")
    until: Stamp | None = Field(None, description="ISO 8601")
    key_id: str | None = Field(None, max_length=64)
    tool: str | None = Field(None, max_length=128)


class UsageRow(BaseModel):
    day: str
    key_id: str
    tool: str
    calls: int
    errors: int
    p50_ms: float
    p99_ms: float
    cost: dict[str, float]


class UsageOut(BaseModel):
    context_id: str
    since: str
    until: str
    rows: list[UsageRow]
    quotas: QuotaOut


def _usage(services: IdentityServices, caller: Caller, args: UsageIn, progress: Progress) -> dict[str, Any]:
    now = services.root.clock.now()
    since, until = parse_time(args.since) or now - timedelta(days=7), parse_time(args.until) or now
    keys = services.identity.governed(caller)
    quotas = _quota_read(
        services, caller, args.key_id, keys
    )  # first: another region's key is refused before its calls are read
    rows = services.audit.usage(caller.context_id, since, until, args.key_id, args.tool, keys)
    return {"context_id": caller.context_id, "since": iso(since), "until": iso(until), "rows": rows, "quotas": quotas}


OPERATIONS.declare(
    Operation(
        name="usage_report",
        family="identity",
        summary="Calls, errors, p50/p99 ms and summed costs per day, key and tool; quota use.",
        input=UsageIn,
        output=UsageOut,
        principals=MANAGEMENT,
        method="GET",
        path="/usage",
        run=_usage,
        read_only=True,
    )
)


class TransferOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    transfer_id: str
    kind: str
    status: str


MAX_UPLOAD_BASE64 = 50 * 1024 * 1024 * 4 // 3 + 4  # 50 MB of export in the call (engram.families.identity.transfers)


class ContextExportIn(OpInput):
    audit: bool = Field(False, description="the audit trail too")


class ContextImportIn(OpInput):
    transfer_id: str | None = Field(None, min_length=1, max_length=64, description="an export made here")
    bytes_base64: str | None = Field(None, min_length=4, max_length=MAX_UPLOAD_BASE64, description="an export, base64")


class TransferIdIn(OpInput):
    transfer_id: str = Field(..., min_length=1, max_length=64)


def _context_export(
    services: IdentityServices, caller: Caller, args: ContextExportIn, progress: Progress
) -> dict[str, Any]:
    return services.transfers.export(caller, args.audit)


def _context_import(
    services: IdentityServices, caller: Caller, args: ContextImportIn, progress: Progress
) -> dict[str, Any]:
    return services.transfers.import_(caller, args.transfer_id, args.bytes_base64)


def _transfer_status(
    services: IdentityServices, caller: Caller, args: TransferIdIn, progress: Progress
) -> dict[str, Any]:
    return services.transfers.status(caller, args.transfer_id)


OPERATIONS.declare(
    Operation(
        name="context_export",
        family="identity",
        summary="Export this whole context, as a job.",
        input=ContextExportIn,
        output=TransferOut,
        principals=MANAGEMENT,
        method="POST",
        path="/context/exports",
        run=_context_export,
    )
)
OPERATIONS.declare(
    Operation(
        name="context_import",
        family="identity",
        summary="Import an Engram export into this context, as a job.",
        input=ContextImportIn,
        output=TransferOut,
        principals=MANAGEMENT,
        method="POST",
        path="/context/imports",
        run=_context_import,
    )
)
OPERATIONS.declare(
    Operation(
        name="context_transfer_status",
        family="identity",
        summary="A context export's or import's status.",
        input=TransferIdIn,
        output=TransferOut,
        principals=MANAGEMENT,
        method="GET",
        path="/context/transfers/status",
        run=_transfer_status,
        read_only=True,
    )
)
