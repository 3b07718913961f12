"""Keys, principals, scope registration and per-call authorization."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
from collections.abc import Iterable, Sequence
from typing import cast

from engram.kernel.caller import ROLES, SYSTEM, Caller, Principal, Role, check_context
from engram.kernel.clock import Clock, iso
from engram.kernel.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthenticated
from engram.kernel.observability import deny
from engram.kernel.ports import KeySource, RecordStore, Write, scan
from engram.kernel.scopes import check_path, check_selector, is_registered, narrow, within, write_paths
from engram.trust.oauth import IssuerPolicy, Issuers, TokenVerifier, issuer_allowed, policy_from

log = logging.getLogger("engram.trust.identity")


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class IdentityService:
    def __init__(self, records: RecordStore, clock: Clock, keys: KeySource | None = None) -> None:
        self._records = records
        self._clock = clock
        self.issuers = Issuers(records, clock)
        # OAuth access tokens, beside the API keys, when the root gave a way to fetch issuers' keys
        self.tokens = TokenVerifier(self.issuers, keys, clock) if keys is not None else None
        self._keys = keys
        self._token_scopes: set[tuple[str, str]] = set()  # (context, path) a token's grant registered already

    # -- keys -----------------------------------------------------------------------------

    def create_key(
        self, contexts: Sequence[str], role: str, grant: Sequence[str], label: str = ""
    ) -> tuple[str, Principal]:
        if role not in ROLES:
            raise InvalidInput(f"unknown principal {role!r}: one of {', '.join(ROLES)}")
        if not contexts:
            raise InvalidInput("a key needs at least one context")
        for c in contexts:
            check_context(c)
        if not grant:
            raise InvalidInput("a key needs at least one grant path")
        grant = [check_path(g) for g in grant]
        secret = "sk-" + secrets.token_urlsafe(32)
        digest = key_hash(secret)
        principal = Principal("key_" + digest[:12], role, tuple(contexts), tuple(grant))
        now = self._clock.now()
        data = {
            "key_id": principal.key_id,
            "role": role,
            "contexts": list(contexts),
            "grant": list(grant),
            "label": label,
            "created_at": iso(now),
            "revoked": False,
        }
        writes = [Write(SYSTEM, "key", digest, data, "cli", expected_version=0)]
        # The grant paths are registered scopes in every context of the key.
        writes += self._scope_writes(contexts, grant, "cli")
        self._records.transact(writes, now)
        return secret, principal

    def _scope_writes(self, contexts: Iterable[str], paths: Iterable[str], actor: str) -> list[Write]:
        now = iso(self._clock.now())
        return [
            Write(c, "scope", p, {"path": p, "registered_at": now}, actor)
            for c in contexts
            for p in paths
            if self._records.get(c, "scope", p) is None
        ]

    def list_keys(self) -> list[dict[str, object]]:
        return [dict(i.data) for i in scan(self._records, SYSTEM, "key")]

    def revoke_key(self, key_id: str) -> None:
        for item in scan(self._records, SYSTEM, "key"):
            if item.data["key_id"] == key_id:
                data = dict(item.data, revoked=True, revoked_at=iso(self._clock.now()))
                self._records.transact(
                    [Write(SYSTEM, "key", item.id, data, "cli", expected_version=item.version)], self._clock.now()
                )
                return
        raise NotFound(f"no key {key_id!r}")

    def authenticate(self, bearer: str | None) -> Principal:
        """The principal of an API key (`sk-...`) or of an OAuth access token (a JWT, `engram.trust.oauth`)."""
        if bearer and self.tokens is not None and bearer.count(".") == 2 and not bearer.startswith("sk-"):
            found = self.tokens.verify(bearer)
            self._register_token_grant(found.contexts, found.grant)
            return Principal(found.key_id, cast(Role, found.role), found.contexts, found.grant)
        if not bearer or not bearer.startswith("sk-"):
            deny({"reason": "missing_key" if not bearer else "malformed_key"})
            raise Unauthenticated("missing or invalid API key")
        item = self._records.get(SYSTEM, "key", key_hash(bearer))
        if item is None or item.data.get("revoked"):
            deny({"reason": "revoked_key" if item else "unknown_key"})
            raise Unauthenticated("missing or invalid API key")
        d = item.data
        return Principal(d["key_id"], d["role"], tuple(d["contexts"]), tuple(d["grant"]))

    def _register_token_grant(self, contexts: Sequence[str], grant: Sequence[str]) -> None:
        """A token's grant paths are registered scopes in its contexts, as a key's are when it is made (once
        per process and path: then a set lookup)."""
        new = [(c, p) for c in contexts for p in grant if (c, p) not in self._token_scopes]
        if not new:
            return
        writes = [w for c, p in new for w in self._scope_writes([c], [p], "oauth")]
        if writes:
            with contextlib.suppress(Conflict):  # registered meanwhile by another request
                self._records.transact(writes, self._clock.now())
        if len(self._token_scopes) > 10_000:
            self._token_scopes.clear()
        self._token_scopes.update(new)

    def trust_issuer(
        self, caller: Caller | None, fields: dict[str, object], context_id: str = "", allowed: Sequence[str] = ()
    ) -> IssuerPolicy:
        """Trust an issuer in a context, for at most `grant` (inside the management key's own grant) and
        `roles`; its grant paths become registered scopes there. A key (`caller`) trusts only issuers the
        deployment allows (`allowed`: the server fetches their keys, and a caller's input never chooses where the
        server connects), and not one trusted here already beyond its grant (409 `in_use`: that policy is a wider
        manager's); the CLI, run by the operator, any."""
        policy = policy_from(fields)
        context = caller.context_id if caller is not None else check_context(context_id)
        if caller is not None:
            urls = [policy.issuer, *([policy.jwks_uri] if policy.jwks_uri else [])]
            if not all(issuer_allowed(u, allowed) for u in urls):
                raise caller.denied(
                    "this deployment does not allow that issuer (its operator lists: ENGRAM_OAUTH_ALLOWED_ISSUERS)",
                    reason="issuer_not_allowed",
                )
            try:
                write_paths([policy.grant], caller.principal.grant)
            except Forbidden as exc:
                raise caller.denied(exc.message, reason="grant_denied") from exc
            here = next((p for p in self.issuers.of_context(context) if p.issuer == policy.issuer), None)
            if here is not None and not self._sees(caller, here):
                # replacing a wider manager's policy would narrow or widen others' tokens
                raise Conflict("that issuer is trusted here already, beyond this key's grant", code="in_use")
        self._records.transact(self._scope_writes([context], policy.grant, "oauth"), self._clock.now())
        self.issuers.put(context, policy)
        return policy

    def trusted(self, caller: Caller) -> list[IssuerPolicy]:
        """The issuers trusted in the caller's context that a management key sees (`_sees`)."""
        return [p for p in self.issuers.of_context(caller.context_id) if self._sees(caller, p)]

    def _sees(self, caller: Caller, policy: IssuerPolicy) -> bool:
        """Whether a management key sees an issuer's policy: one whose grant lies inside its own (as its trust
        had to), or any, for a key that governs the whole context (`governed`)."""
        return within(caller.principal.grant, policy.grant) or self.governs(caller, None)

    def distrust_issuer(self, caller: Caller, issuer: str) -> None:
        """Stop trusting an issuer here, one the key sees (`trusted`); another is not found, as if absent."""
        here = next((p for p in self.issuers.of_context(caller.context_id) if p.issuer == issuer), None)
        if here is None or not self._sees(caller, here):
            raise NotFound(f"no issuer {issuer!r} in this context", code="issuer_not_found")
        self.issuers.remove(caller.context_id, issuer)

    def governs(self, caller: Caller, key_id: str | None) -> bool:
        """Whether a management key may set what binds one key of its context (`key_id`) or the whole context
        (None) — see `governed`. A narrower manager (one user's region, say) could otherwise throttle everyone."""
        if key_id is None:  # the context: no need to list the keys
            return within(caller.principal.grant, self.registered(caller.context_id))
        keys = self.governed(caller)
        return keys is None or key_id in keys

    def may_limit(self, caller: Caller, key_id: str | None) -> bool:
        """Whether a management key may set or lift the quotas of `key_id` (None: the whole context). Nobody
        governs a limit that binds themselves: never its own key's; never the context's (they bind every key of it,
        this one too: the operator's, `engram quota set`); only those of a key it governs (`governs`) that is
        strictly below it — a grant inside its own and narrower, or the same paths with a lesser role (an agent
        key of its region) — never a key as wide as itself or wider, such as a peer manager. An OAuth principal's
        (`tok_…`, no key record) only by the context's manager."""
        if key_id is None or key_id == caller.principal.key_id or not self.governs(caller, key_id):
            return False
        record = next((k for k in self.list_keys() if k["key_id"] == key_id), None)
        if record is not None and caller.context_id not in cast(list[str], record["contexts"]):
            return False  # another context's key: as a key that does not exist (nothing says it does)
        if record is None:
            return key_id.startswith("tok_") and self.governed(caller) is None
        theirs = cast(list[str], record["grant"])
        lesser = ROLES.index(str(record["role"])) < ROLES.index(caller.principal.role)
        return lesser or not within(
            theirs, caller.principal.grant
        )  # not as wide: the caller's grant is not inside theirs

    def governed(self, caller: Caller) -> frozenset[str] | None:
        """The keys of its context a management key governs, and whose calls it reads in the audit trail and
        usage: itself, and those whose grant lies inside its own. None: every key and token, and the context
        itself — a grant that holds every scope registered there (every key's grant and every trusted issuer's)."""
        grant = caller.principal.grant
        if within(grant, self.registered(caller.context_id)):
            return None
        return frozenset(
            [caller.principal.key_id]
            + [
                str(k["key_id"])
                for k in self.list_keys()
                if caller.context_id in cast(list[str], k["contexts"]) and within(grant, cast(list[str], k["grant"]))
            ]
        )

    def warm_tokens(self) -> None:
        """Fetch every trusted issuer's keys now (the Lambda authorizer, before its SnapStart snapshot)."""
        warm = getattr(self._keys, "warm", None)
        if warm is None:
            return
        try:
            pairs = []
            for issuer in self.issuers.all_issuers():
                policies = self.issuers.for_issuer(issuer).values()
                pairs.append((issuer, next((p.jwks_uri for p in policies if p.jwks_uri), None)))
            warm(pairs)
        except Exception:  # best effort: the first token fetches them (a store unreachable at init included)
            log.warning("could not fetch the trusted issuers' keys ahead", exc_info=True)

    def enter(
        self, principal: Principal, context_id: str | None, allowed: frozenset[Role], op: str, transport: str = "http"
    ) -> Caller:
        """The caller for one operation: the context must be the key's (401, masked) and the role allowed."""
        if context_id is None:
            if len(principal.contexts) != 1:
                raise InvalidInput("context_id is required: this key holds several contexts")
            context_id = principal.contexts[0]
        if context_id not in principal.contexts:
            deny({"reason": "context_not_granted", "key_id": principal.key_id, "operation": op})
            raise Unauthenticated("missing or invalid API key")  # masked: never reveal that it exists
        caller = Caller(principal, context_id, transport)
        if principal.role not in allowed:
            raise caller.denied(
                f"{op} needs principal {' or '.join(sorted(allowed))}; this key is {principal.role}",
                reason="principal_not_allowed",
                operation=op,
            )
        return caller

    # -- scopes ---------------------------------------------------------------------------

    def register_scopes(
        self, context_id: str, paths: Sequence[str], actor: str = "cli", caller: Caller | None = None
    ) -> list[str]:
        """Register paths in a context. A key (`caller`) registers only inside its grant (403); the CLI,
        which holds the data folder itself, anywhere."""
        check_context(context_id)
        clean = [check_path(p) for p in paths]
        if not clean:
            raise InvalidInput("give at least one scope path")
        if caller is not None:
            try:
                write_paths([clean], caller.principal.grant)
            except Forbidden as exc:
                raise caller.denied(exc.message, reason="grant_denied") from exc
        self._records.transact(self._scope_writes([context_id], clean, actor), self._clock.now())
        return clean

    def registered(self, context_id: str) -> list[str]:
        return [i.id for i in scan(self._records, context_id, "scope")]

    def _check_registered(self, caller: Caller, paths: Iterable[str]) -> None:
        registered = self.registered(caller.context_id)
        missing = sorted({p for p in paths if not is_registered(p, registered)})
        if missing:
            raise InvalidInput(
                f"scope path(s) not registered: {', '.join(missing)} (register with `engram scopes create`)",
                code="scope_not_registered",
            )

    def write_scopes(self, caller: Caller, scopes: list[list[str]] | None) -> list[str]:
        """The scope paths a write is tagged with: inside the grant (403), registered (400)."""
        if scopes is not None:
            scopes = check_selector(scopes, "scopes")
        try:
            paths = write_paths(scopes, caller.principal.grant)
        except Forbidden as exc:
            raise caller.denied(exc.message, reason="grant_denied") from exc
        if scopes is not None:
            self._check_registered(caller, paths)
        return paths

    def read_lens(self, caller: Caller, lens: list[list[str]] | None) -> list[list[str]]:
        """The visibility selector of a read: the lens narrowed by the grant (403), registered (400)."""
        if lens is not None:
            lens = check_selector(lens, "lens")
        try:
            visibility = narrow(lens, caller.principal.grant)
        except Forbidden as exc:
            raise caller.denied(exc.message, reason="grant_denied") from exc
        if lens is not None:
            self._check_registered(caller, (p for c in lens for p in c))
        return visibility
