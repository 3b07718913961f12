"""The console (#52) at /console: the static single-page app the package ships (built from `console/` by `make
console`), served with a strict Content-Security-Policy. It is a client of the REST API and nothing more: it holds
no credential of its own and reaches no route a key could not, so the files themselves are public.

The policy: scripts and styles only from here (no inline script, no `eval`), no frame may hold the console, and it
connects only to this origin and to the origins of the OAuth issuers a context may trust (the sign-in's token
exchange)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

ROOT = "/console"


def assets() -> Path | None:
    """Where the built console lies in the package, or None (a build without it)."""
    found = Path(str(resources.files("engram").joinpath("console")))
    return found if (found / "index.html").is_file() else None


def policy(issuers: list[str]) -> str:
    origins = sorted({f"{p.scheme}://{p.netloc}" for p in map(urlsplit, issuers) if p.scheme in ("http", "https")})
    return "; ".join([
        "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data: blob:",
        "font-src 'self'", "connect-src " + " ".join(["'self'", *origins]), "worker-src 'self' blob:",
        "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'",
    ])  # fmt: skip


class Console:
    """The console's files with the security headers on every answer."""

    def __init__(self, directory: Path, issuers: Any) -> None:
        self.files = StaticFiles(directory=directory, html=True)
        self.issuers = issuers  # () -> the issuer URLs connect-src allows

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {
            "content-security-policy": policy(self.issuers()),
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
            "x-frame-options": "DENY",
            "cross-origin-opener-policy": "same-origin",
        }

        async def secured(message: Any) -> None:
            if message["type"] == "http.response.start":
                raw = list(message.get("headers", []))
                path = scope.get("path", "")
                cache = "public, max-age=31536000, immutable" if "/assets/" in path else "no-cache"
                raw += [(k.encode(), v.encode()) for k, v in {**headers, "cache-control": cache}.items()]
                message = {**message, "headers": raw}
            await send(message)

        await self.files(scope, receive, secured)


def mount_console(app: Any, issuers: Any) -> None:
    """/console/ on `app` (and /console moved there), when the package holds the built console."""
    directory = assets()
    if directory is None:
        return

    async def moved(request: Any) -> Response:
        # to the page by its name: API Gateway's `/console/{proxy+}` route takes no empty rest
        return RedirectResponse(ROOT + "/index.html", status_code=308)

    app.add_route(ROOT, moved, methods=["GET", "HEAD"], include_in_schema=False)
    app.mount(ROOT, Console(directory, issuers), name="console")
