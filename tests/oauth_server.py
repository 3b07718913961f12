"""A small OAuth 2.1 authorization server for the tests (issue #28): RFC 8414 metadata, dynamic client
registration (RFC 7591), the authorization-code grant with PKCE (S256 only), RFC 8707 `resource` carried into
the token's `aud`, RS256 JWT access tokens, a JWKS. It approves every authorization request for one user (the
`user` attribute) with the scopes `granted` says, so a real MCP client can run its whole flow unattended.

`mint` signs any token the tests want (expired, wrong audience, another key, `alg: none`...).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from engram.cli.devserver import free_port, in_thread


def _b64(n: int) -> str:
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()
    return {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": _b64(numbers.n), "e": _b64(numbers.e)}


class AuthServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "k1"
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # never published
        self.user = "alice"
        self.granted = "engram:agent engram:grant:org/acme/user/alice"
        self.jwks_fetches = 0
        self.codes: dict[str, dict[str, Any]] = {}
        self.clients: dict[str, dict[str, Any]] = {}
        self.tokens_issued: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self.metadata),
                Route("/jwks", self.jwks),
                Route("/register", self.register, methods=["POST"]),
                Route("/authorize", self.authorize),
                Route("/token", self.token, methods=["POST"]),
            ],
            # a browser's client (the console, #52) reads the metadata, registers and exchanges its code cross-origin
            middleware=[Middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["*"], allow_headers=["*"])],
        )

    # -- endpoints ------------------------------------------------------------------------------

    async def metadata(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "registration_endpoint": f"{self.issuer}/register",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "scopes_supported": ["engram:agent", "engram:supervisor", "engram:management"],
            }
        )

    async def jwks(self, request: Request) -> Response:
        self.jwks_fetches += 1
        return JSONResponse({"keys": [rsa_jwk(self.key, self.kid)]}, headers={"cache-control": "max-age=600"})

    async def register(self, request: Request) -> Response:
        meta = await request.json()
        client_id = uuid.uuid4().hex
        info = {**meta, "client_id": client_id, "client_id_issued_at": int(time.time()),
                "token_endpoint_auth_method": "none"}  # fmt: skip
        self.clients[client_id] = info
        return JSONResponse(info, status_code=201)

    async def authorize(self, request: Request) -> Response:
        q = request.query_params
        client = self.clients.get(q.get("client_id", ""))
        if client is None or q.get("redirect_uri") not in client.get("redirect_uris", []):
            return JSONResponse({"error": "invalid_client"}, status_code=400)
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse({"error": "invalid_request", "error_description": "PKCE S256 required"}, 400)
        code = secrets.token_urlsafe(24)
        self.codes[code] = {
            "client_id": q["client_id"],
            "redirect_uri": q["redirect_uri"],
            "challenge": q["code_challenge"],
            "resource": q.get("resource"),
            "scope": q.get("scope"),
        }
        location = q["redirect_uri"] + "?" + urlencode({"code": code, "state": q.get("state", ""), "iss": self.issuer})
        return RedirectResponse(location, status_code=302)

    async def token(self, request: Request) -> Response:
        form = await request.form()
        grant = self.codes.pop(str(form.get("code", "")), None)
        if form.get("grant_type") != "authorization_code" or grant is None:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        verifier = str(form.get("code_verifier", ""))
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if challenge != grant["challenge"] or form.get("client_id") != grant["client_id"]:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE verification failed"}, 400)
        if form.get("redirect_uri") != grant["redirect_uri"]:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        resource = str(form.get("resource") or grant["resource"] or "")
        claims = {"aud": resource, "scope": self.granted, "client_id": grant["client_id"]}
        self.tokens_issued.append({"resource": resource, "requested_scope": grant["scope"]})
        return JSONResponse(
            {"access_token": self.mint(**claims), "token_type": "Bearer", "expires_in": 3600, "scope": self.granted}
        )

    # -- tokens for the tests -------------------------------------------------------------------

    def mint(
        self,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = "default",
        alg: str = "RS256",
        lifetime: int = 3600,
        **claims: Any,
    ) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "sub": self.user, "iat": now, "nbf": now, "exp": now + lifetime} | claims
        body = {k: v for k, v in body.items() if v is not None}
        headers = {"kid": self.kid if kid == "default" else kid} if kid is not None else {}
        if alg == "none":
            head = {"alg": "none", "typ": "JWT", **headers}
            part = [base64.urlsafe_b64encode(json.dumps(x).encode()).rstrip(b"=").decode() for x in (head, body)]
            return f"{part[0]}.{part[1]}."
        return jwt.encode(body, key or self.key, algorithm=alg, headers=headers or None)


@contextmanager
def running_auth_server() -> Iterator[AuthServer]:
    server = AuthServer()
    with in_thread(server.app, server.port):
        yield server
