"""OAuth 2.1 access tokens: Engram as a resource server (MCP's authorization spec, RFC 9728, RFC 8707).

A context's management key trusts an issuer (an authorization server) for its context with an `IssuerPolicy`:
which audiences name this resource, which claim names the principal, the roles and the grant paths a token
may carry at most. A bearer JWT is then a principal like an API key's:

- its signature checks against the issuer's JWKS (fetched from the issuer by a `KeySource`, cached with its
  expiry, fetched again on an unknown `kid`); `alg: none`, HMAC and unknown algorithms are refused;
- `exp` and `nbf` hold (30 s of clock skew), `iss` is a trusted issuer, `aud` names this resource: a token
  minted for another resource is refused (RFC 8707);
- its `scope` claim (or the policy's `scope_claim`; `scp`) gives the role (`engram:agent`, `engram:supervisor`,
  `engram:management`; several: the first of them the policy lists; none: the policy's first role) and the grant
  (`engram:grant:org/acme/user/alice`, or the policy's template filled with the principal), and may pick the
  context (`engram:context:acme`). The grant only narrows: a path outside the policy's grant, or a role the
  policy does not allow, refuses the token.

Every refusal is the same 401 (`invalid_token`) to the caller; the reason goes to the denial log.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engram.kernel.clock import Clock
from engram.kernel.errors import InvalidInput, NotFound, Unauthenticated, Unavailable
from engram.kernel.expiring import Expiring
from engram.kernel.observability import deny
from engram.kernel.ports import KeySource, RecordStore, Write
from engram.kernel.retry import on_conflict
from engram.trust import jws

SYSTEM = "_system"
ISSUER = "issuer"
LEEWAY = 30  # seconds of clock skew allowed on exp / nbf / iat
POLICY_TTL = 30.0  # seconds a process keeps an issuer's policies before reading them again
SCOPE_PREFIX = "engram:"
ROLE_SCOPES = ("agent", "supervisor", "management")


class InvalidToken(Unauthenticated):
    """A bearer token Engram does not accept (RFC 6750 `invalid_token`); the message stays generic."""

    code = "invalid_token"

    def __init__(self) -> None:
        super().__init__("invalid or expired access token")


def check_url(url: str, what: str = "issuer") -> str:
    """An issuer or JWKS URL: https, or http to a loopback address (a local authorization server); no user
    info, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        raise InvalidInput(f"{what} is not a URL") from None
    loopback = host == "localhost" or _loopback_ip(host)
    if parts.scheme not in ("https", "http") or not host or (parts.scheme == "http" and not loopback):
        raise InvalidInput(f"{what} must be an https URL (http only for localhost)")
    if parts.username or parts.password or parts.query or parts.fragment or len(url) > 512:
        raise InvalidInput(f"{what} must be a plain URL: no user info, query or fragment, at most 512 characters")
    return url


def _loopback_ip(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


RoleName = Literal["agent", "supervisor", "management"]


def _agent() -> list[RoleName]:
    return ["agent"]


class IssuerPolicy(BaseModel):
    """What one context trusts one issuer for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(description="The authorization server's issuer identifier (its tokens' `iss`)")
    audience: list[str] = Field(
        min_length=1, max_length=10, description="Accepted `aud` values: this resource's URLs (RFC 8707)"
    )
    grant: list[str] = Field(
        min_length=1, max_length=20, description="The widest grant a token may carry (scope paths)"
    )
    roles: list[RoleName] = Field(
        default_factory=_agent,
        min_length=1,
        description="Roles a token may carry; the first is the default",
    )
    jwks_uri: str | None = Field(None, description="The issuer's JWKS; default: the one its metadata names")
    principal_claim: str = Field("sub", pattern=r"^[A-Za-z0-9_.:-]{1,64}$", description="The claim naming the caller")
    scope_claim: str = Field(
        "scope",
        pattern=r"^[A-Za-z0-9_.:/-]{1,64}$",
        description="The claim carrying the engram: scopes (e.g. Auth0's permissions); `scp` when it is missing",
    )
    grant_template: str | None = Field(
        None,
        max_length=256,
        description="The grant of a token that names none, e.g. org/acme/user/{principal}; none: such a token "
        "is refused",
    )

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return check_url(value)

    @field_validator("jwks_uri")
    @classmethod
    def _jwks(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, "jwks_uri")

    @field_validator("grant")
    @classmethod
    def _grant(cls, value: list[str]) -> list[str]:
        from engram.kernel.scopes import check_path

        return [check_path(p) for p in value]

    @field_validator("audience")
    @classmethod
    def _audience(cls, value: list[str]) -> list[str]:
        if any(not a or len(a) > 512 for a in value):
            raise ValueError("each audience is 1 to 512 characters")
        return value

    @field_validator("grant_template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and value.count("{principal}") != 1:
            raise ValueError("grant_template holds {principal} once")
        return value


def issuer_allowed(url: str, allowed: Sequence[str]) -> bool:
    """Whether the deployment's allow-list admits a URL: an entry is an issuer URL (the URL itself, or anything
    under it when it ends with `/`), or an origin (`https://login.example.com`: any path on it)."""
    for entry in allowed:
        origin = urlsplit(entry)
        if url == entry or (entry.endswith("/") and url.startswith(entry)):
            return True
        if origin.path in ("", "/") and urlsplit(url)[:2] == origin[:2]:
            return True
    return False


def issuer_id(issuer: str) -> str:
    return hashlib.sha256(issuer.encode()).hexdigest()[:32]


def token_key_id(issuer: str, subject: str) -> str:
    """The key id a token's principal is known by (audit, quotas, usage): stable per issuer and subject."""
    return "tok_" + hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class TokenGrant:
    key_id: str
    role: str
    contexts: tuple[str, ...]
    grant: tuple[str, ...]


class Issuers:
    """The issuer policies of every context (records `_system` / issuer / hash of the issuer URL)."""

    def __init__(self, records: RecordStore, clock: Clock) -> None:
        self._records, self._clock = records, clock
        self._cache: Expiring[str, dict[str, IssuerPolicy]] = Expiring(POLICY_TTL, 1000)

    def put(self, context_id: str, policy: IssuerPolicy) -> None:
        self._update(policy.issuer, lambda contexts: {**contexts, context_id: policy.model_dump()})

    def remove(self, context_id: str, issuer: str) -> None:
        def drop(contexts: dict[str, Any]) -> dict[str, Any]:
            if context_id not in contexts:
                raise NotFound(f"no issuer {issuer!r} in this context", code="issuer_not_found")
            return {c: p for c, p in contexts.items() if c != context_id}

        self._update(issuer, drop)

    def _update(self, issuer: str, change: Any) -> None:
        def write() -> None:  # read, change, write over the version read (another writer: again)
            item = self._records.get(SYSTEM, ISSUER, issuer_id(issuer))
            contexts = change(dict(item.data["contexts"]) if item is not None else {})
            write = Write(SYSTEM, ISSUER, issuer_id(issuer), {"issuer": issuer, "contexts": contexts}, "management",
                          expected_version=item.version if item is not None else 0)  # fmt: skip
            self._records.transact([write], self._clock.now())

        on_conflict(write)
        self._cache.drop(issuer)

    def of_context(self, context_id: str) -> list[IssuerPolicy]:
        from engram.kernel.ports import scan

        out = []
        for item in scan(self._records, SYSTEM, ISSUER):
            policy = item.data["contexts"].get(context_id)
            if policy is not None:
                out.append(IssuerPolicy.model_validate(policy))
        return out

    def all_issuers(self) -> list[str]:
        from engram.kernel.ports import scan

        return sorted(str(i.data["issuer"]) for i in scan(self._records, SYSTEM, ISSUER) if i.data["contexts"])

    def for_issuer(self, issuer: str) -> dict[str, IssuerPolicy]:
        """The policies of every context that trusts `issuer` (read at most every POLICY_TTL seconds)."""

        def load() -> dict[str, IssuerPolicy]:
            item = self._records.get(SYSTEM, ISSUER, issuer_id(issuer))
            if item is None or item.data.get("issuer") != issuer:
                return {}
            return {c: IssuerPolicy.model_validate(p) for c, p in item.data["contexts"].items()}

        return self._cache.get(issuer, load)


class TokenVerifier:
    def __init__(self, issuers: Issuers, keys: KeySource, clock: Clock) -> None:
        self.issuers, self._keys, self._clock = issuers, keys, clock

    def verify(self, token: str) -> TokenGrant:
        """The grant of a valid access token. Raises InvalidToken (401) for any other."""
        try:
            return self._verify(token)
        except jws.BadToken as exc:
            deny({"reason": "invalid_token", "detail": str(exc)})
            raise InvalidToken() from None
        except _Refused as exc:
            deny({"reason": "invalid_token", "detail": exc.args[0]})
            raise InvalidToken() from None

    def _verify(self, token: str) -> TokenGrant:
        header, claims = jws.parse(token)
        issuer = claims.get("iss")
        if not isinstance(issuer, str) or not issuer:
            raise _Refused("no iss")
        policies = self.issuers.for_issuer(issuer)
        if not policies:
            raise _Refused("untrusted issuer")
        audiences = claims.get("aud")
        aud = {audiences} if isinstance(audiences, str) else set(audiences) if isinstance(audiences, list) else set()

        def named(p: IssuerPolicy) -> set[str]:
            return {
                s[len("engram:context:") :] for s in _scopes(claims, p.scope_claim) if s.startswith("engram:context:")
            }

        matching = {c: p for c, p in policies.items() if _for_us(aud, p.audience) and c in (named(p) or {c})}
        if not matching:
            raise _Refused("wrong audience")
        # Each context's trust is its own: a context accepts the token only if the keys *its* policy names
        # signed it. Another context trusting the same issuer URL with keys of its own signs for nobody else.
        matching = self._signed_for(issuer, matching, header, token)
        self._check_times(claims)
        if len(matching) > 1 and not any(named(p) for p in matching.values()):
            raise _Refused("the issuer is trusted in several contexts; name one with engram:context:<id>")
        grants = {(c, *self._grant_of(p, claims, _scopes(claims, p.scope_claim))) for c, p in matching.items()}
        shapes = {(g[1], g[2]) for g in grants}
        if len(shapes) != 1:
            raise _Refused("the token fits several contexts differently; name one with engram:context:<id>")
        role, grant = shapes.pop()
        subject = str(claims.get(next(iter(matching.values())).principal_claim))
        return TokenGrant(token_key_id(issuer, subject), role, tuple(sorted(matching)), grant)

    def _signed_for(
        self, issuer: str, policies: dict[str, IssuerPolicy], header: dict[str, Any], token: str
    ) -> dict[str, IssuerPolicy]:
        """The contexts among `policies` whose own key source (the policy's `jwks_uri`, or the issuer's
        metadata) holds the key that signed `token`. Raises _Refused when none does."""
        by_source: dict[str | None, list[str]] = {}
        for context, policy in policies.items():
            by_source.setdefault(policy.jwks_uri, []).append(context)
        signed: dict[str, IssuerPolicy] = {}
        why: Exception = _Refused("bad signature")
        for jwks_uri, contexts in sorted(by_source.items(), key=lambda kv: kv[0] or ""):
            try:
                self._check_signature(issuer, jwks_uri, header, token)
            except (_Refused, Unavailable) as exc:  # one context's keys out of reach fail only that context
                why = exc
                continue
            signed.update({c: policies[c] for c in contexts})
        if not signed:
            raise why
        return signed

    def _check_signature(self, issuer: str, jwks_uri: str | None, header: dict[str, Any], token: str) -> None:
        kid = header.get("kid")
        alg = str(header["alg"])
        for refresh in (False, True):  # an unknown kid: the issuer may have rotated its keys
            keys = [k for k in self._keys.keys(issuer, jwks_uri, refresh) if isinstance(k, dict)]
            if kid is not None:
                keys = [k for k in keys if k.get("kid") == kid]
            else:
                keys = [k for k in keys if k.get("alg") in (None, alg)][:5]
            if keys:
                if not any(_verifies(alg, k, token) for k in keys):
                    raise _Refused("bad signature")
                return
        raise _Refused("unknown kid")

    def _check_times(self, claims: dict[str, Any]) -> None:
        now = self._clock.now().timestamp()
        exp, nbf, iat = claims.get("exp"), claims.get("nbf"), claims.get("iat")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise _Refused("no exp")
        if now > exp + LEEWAY:
            raise _Refused("expired")
        if isinstance(nbf, int | float) and now + LEEWAY < nbf:
            raise _Refused("not yet valid")
        if isinstance(iat, int | float) and now + LEEWAY < iat:
            raise _Refused("issued in the future")

    def _grant_of(self, policy: IssuerPolicy, claims: dict[str, Any], scopes: list[str]) -> tuple[str, tuple[str, ...]]:
        from engram.kernel.scopes import check_path, within

        subject = claims.get(policy.principal_claim)
        if not isinstance(subject, str) or not 0 < len(subject) <= 256:
            raise _Refused("no principal claim")
        carried = {s[len(SCOPE_PREFIX) :] for s in scopes if s.startswith(SCOPE_PREFIX)} & set(ROLE_SCOPES)
        allowed = [r for r in policy.roles if r in carried]  # the policy's order decides between several
        if carried and not allowed:
            raise _Refused("role not allowed")
        role = allowed[0] if allowed else policy.roles[0]
        asked = [s[len("engram:grant:") :] for s in scopes if s.startswith("engram:grant:")]
        if not asked:
            if policy.grant_template is None or "/" in subject:
                raise _Refused("no grant")
            asked = [policy.grant_template.replace("{principal}", subject)]
        try:
            paths = tuple(sorted({check_path(p) for p in asked}))
        except InvalidInput:
            raise _Refused("malformed grant") from None
        if len(paths) > 20 or not within(policy.grant, paths):
            raise _Refused("grant wider than allowed")
        return role, paths


class _Refused(Exception):
    """Why a token was refused (logged, never told)."""


def _for_us(aud: set[str], audiences: list[str]) -> bool:
    """Whether a token's `aud` names one of the policy's resources, or a resource below one (a family's
    endpoint `.../mcp/memory` under `.../mcp`)."""
    return any(a == b or a.startswith(b.rstrip("/") + "/") for a in aud if isinstance(a, str) for b in audiences)


def _verifies(alg: str, jwk: dict[str, Any], token: str) -> bool:
    try:
        return jws.verify(alg, jwk, token)
    except jws.BadToken:
        return False


def _scopes(claims: dict[str, Any], claim: str = "scope") -> list[str]:
    """The scopes a token carries: the policy's claim (a space-separated string or a list), else `scp`."""
    raw = claims.get(claim, claims.get("scp"))
    if isinstance(raw, str):
        return raw.split()[:100]
    if isinstance(raw, list):
        return [s for s in raw[:100] if isinstance(s, str)]
    return []


def policy_from(data: dict[str, Any]) -> IssuerPolicy:
    """An IssuerPolicy from a caller's arguments (400 naming the field)."""
    try:
        return IssuerPolicy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"invalid issuer: {where}: {first['msg']}") from None
