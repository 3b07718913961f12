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

from engram.errors import Unauthenticated
from engram.identity import Principal
from engram.wiring import Engram

UNAUTHENTICATED = "missing or invalid API key"


def bearer(headers: Mapping[str, str]) -> str | None:
    """The key of an `Authorization: Bearer sk-...` header (header names lower-cased)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authorizer_context(principal: Principal | None) -> dict[str, str]:
    """What the Lambda authorizer hands to the functions (API Gateway allows flat string values)."""
    if principal is None:
        return {"key_id": ""}
    return {
        "key_id": principal.key_id,
        "role": principal.role,
        "contexts": json.dumps(list(principal.contexts)),
        "grant": json.dumps(list(principal.grant)),
    }


def principal_from_authorizer(context: Mapping[str, Any]) -> Principal:
    if not context.get("key_id"):
        raise Unauthenticated(UNAUTHENTICATED)  # the authorizer found no valid key (and audited it)
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
    """The principal of an HTTP request (ASGI scope). Raises Unauthenticated (401)."""
    context = authorized_by_gateway(scope)
    if context is not None:
        return principal_from_authorizer(context)
    headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
    return engram.identity.authenticate(bearer(headers))
