"""Who is calling: the bearer key of a request, or what the AWS Lambda authorizer already resolved.

Behind API Gateway the authorizer looks the key up once (its answer is cached by the gateway) and passes
the principal in `requestContext.authorizer.lambda`; the functions trust that context, which only API
Gateway (or the gateway function, invoking a family function) can set. Everywhere else — the local
server, a function called without an authorizer — the key is looked up here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engram.kernel.caller import Principal
from engram.kernel.errors import Unauthenticated
from engram.trust.oauth import InvalidToken
from engram.wiring import Engram

UNAUTHENTICATED = "missing or invalid API key"


def bearer(headers: Mapping[str, str]) -> str | None:
    """The key of an `Authorization: Bearer sk-...` header (header names lower-cased)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authorizer_context(principal: Principal | None, refused: str = "") -> dict[str, str]:
    """What the Lambda authorizer hands to the functions (API Gateway allows flat string values); with no
    principal, the code of the refusal (`invalid_token`: a token was presented and refused)."""
    if principal is None:
        return {"key_id": "", "refused": refused}
    return {
        "key_id": principal.key_id,
        "role": principal.role,
        "contexts": json.dumps(list(principal.contexts)),
        "grant": json.dumps(list(principal.grant)),
    }


def principal_from_authorizer(context: Mapping[str, Any]) -> Principal:
    if not context.get("key_id"):  # the authorizer found no valid key or token (and audited it)
        raise InvalidToken() if context.get("refused") == "invalid_token" else Unauthenticated(UNAUTHENTICATED)
    return Principal(
        str(context["key_id"]),
        context["role"],
        tuple(json.loads(context["contexts"])),
        tuple(json.loads(context["grant"])),
    )


def authorized_by_gateway(scope: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The authorizer's context of the API Gateway event behind an ASGI scope (Mangum sets `aws.event`)."""
    event = scope.get("aws.event")
    if not isinstance(event, dict):
        return None
    found = event.get("requestContext", {}).get("authorizer", {}).get("lambda")
    return found if isinstance(found, dict) else None


def principal_for(engram: Engram, scope: Mapping[str, Any]) -> Principal:
    """The principal of an HTTP request (ASGI scope): an API key's or an OAuth access token's. Raises
    Unauthenticated (401) pointing at the resource's metadata."""
    try:
        context = authorized_by_gateway(scope)
        if context is not None:
            return principal_from_authorizer(context)
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        return engram.identity.authenticate(bearer(headers))
    except Unauthenticated as exc:
        exc.resource_metadata = metadata_url(engram.settings.public_url, scope)
        raise


WELL_KNOWN = "/.well-known/oauth-protected-resource"


def base_url(public_url: str, scope: Mapping[str, Any]) -> str:
    """This deployment's base URL: the setting, or the request's scheme and Host."""
    if public_url:
        return public_url.rstrip("/")
    headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
    proto = headers.get("x-forwarded-proto", str(scope.get("scheme", "http"))).split(",")[0].strip()
    host = headers.get("host", "localhost")
    return f"{'https' if proto == 'https' else 'http'}://{host}"


def resource_path(path: str) -> str:
    """The protected resource a request path belongs to: `/mcp`, `/mcp/{family}`, or `/api/v1`."""
    parts = path.strip("/").split("/")
    if parts[0] == "mcp":
        return "/" + "/".join(parts[:2])
    if parts[:2] == ["api", "v1"]:
        return "/api/v1"
    return ""


def metadata_url(public_url: str, scope: Mapping[str, Any]) -> str:
    """Where the protected resource metadata (RFC 9728, path-inserted) of the request's resource is."""
    return base_url(public_url, scope) + WELL_KNOWN + resource_path(str(scope.get("path", "")))
