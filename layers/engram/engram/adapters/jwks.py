"""JWKS over HTTPS (`KeySource`): the signing keys of the OAuth issuers management keys configured.

Keys are kept per URL, in the process (and so in a SnapStart snapshot: the authorizer fetches them before
its snapshot), for the `Cache-Control: max-age` the issuer sends (clamped to 1 minute .. 1 day; 15 minutes when
it sends none) — checked against the wall clock, so a restored snapshot honours the expiry. A forced fetch (a
token with an unknown `kid`) happens at most every `REFRESH_GAP` seconds per URL: a caller cannot make the
server open connections at will. Only URLs from a policy are fetched (https, or http to loopback), never one
a token names; redirects are not followed; answers over 256 KB are refused.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from engram.kernel.errors import Unavailable
from engram.trust.oauth import check_url

DEFAULT_TTL = 900.0
MIN_TTL, MAX_TTL = 60.0, 86_400.0
REFRESH_GAP = 30.0
TIMEOUT = 5.0
MAX_BYTES = 256 * 1024

_CACHE: dict[str, tuple[float, float, list[dict[str, Any]]]] = {}  # url -> (expires, fetched, keys), wall clock
_JWKS_URI: dict[str, str] = {}  # issuer -> the jwks_uri its metadata names
_FAILED: dict[str, float] = {}  # url -> when a fetch of it last failed: not tried again for REFRESH_GAP
_LOCK = threading.Lock()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _get(url: str) -> tuple[Any, float]:
    """(JSON, seconds it may be kept) of a GET. Raises Unavailable (at once, for REFRESH_GAP seconds after a
    failed fetch of the same URL)."""
    check_url(url, "URL")
    with _LOCK:
        failed = _FAILED.get(url)
    if failed is not None and time.time() - failed < REFRESH_GAP:
        raise Unavailable("the issuer's keys could not be fetched (recently failed)")
    try:
        return _fetch(url)
    except Unavailable:
        with _LOCK:
            _FAILED[url] = time.time()
        raise


def _fetch(url: str) -> tuple[Any, float]:
    request = urllib.request.Request(url, headers={"accept": "application/json", "user-agent": "engram"})
    try:
        with _OPENER.open(request, timeout=TIMEOUT) as answer:
            body = answer.read(MAX_BYTES + 1)
            control = answer.headers.get("cache-control", "")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Unavailable(f"the issuer's keys could not be fetched ({type(exc).__name__})") from None
    if len(body) > MAX_BYTES:
        raise Unavailable("the issuer's answer is too large")
    try:
        value = json.loads(body)
    except ValueError:
        raise Unavailable("the issuer's answer is not JSON") from None
    found = re.search(r"max-age=(\d+)", control)
    ttl = float(found.group(1)) if found else DEFAULT_TTL
    return value, min(max(ttl, MIN_TTL), MAX_TTL)


def _metadata_urls(issuer: str) -> list[str]:
    """RFC 8414 section 3.1 (the well-known segment before the issuer's path), then OpenID Connect Discovery."""
    scheme, rest = issuer.split("://", 1)
    host, _, path = rest.partition("/")
    path = path.rstrip("/")
    suffix = f"/{path}" if path else ""
    return [
        f"{scheme}://{host}/.well-known/oauth-authorization-server{suffix}",
        f"{issuer.rstrip('/')}/.well-known/openid-configuration",
    ]


class HttpKeySource:
    def keys(self, issuer: str, jwks_uri: str | None, refresh: bool = False) -> list[dict[str, Any]]:
        url = jwks_uri or self._discover(issuer)
        now = time.time()
        with _LOCK:
            cached = _CACHE.get(url)
        if cached is not None and cached[0] > now and not (refresh and now - cached[1] >= REFRESH_GAP):
            return cached[2]
        if cached is not None and refresh and now - cached[1] < REFRESH_GAP:
            return cached[2]
        value, ttl = _get(url)
        keys = value.get("keys") if isinstance(value, dict) else None
        if not isinstance(keys, list):
            raise Unavailable("the issuer's JWKS has no keys")
        keys = [k for k in keys[:100] if isinstance(k, dict)]
        with _LOCK:
            _CACHE[url] = (now + ttl, now, keys)
        return keys

    def _discover(self, issuer: str) -> str:
        with _LOCK:
            known = _JWKS_URI.get(issuer)
        if known is not None:
            return known
        for url in _metadata_urls(issuer):
            try:
                value, _ = _get(url)
            except Unavailable:
                continue
            if isinstance(value, dict) and value.get("issuer") == issuer and isinstance(value.get("jwks_uri"), str):
                found = check_url(value["jwks_uri"], "jwks_uri")
                with _LOCK:
                    _JWKS_URI[issuer] = found
                return found
        raise Unavailable("the issuer's metadata names no jwks_uri")

    def warm(self, issuers: list[tuple[str, str | None]]) -> None:
        """Fetch these (issuer, jwks_uri)s' keys now (before a SnapStart snapshot); failures are left for later."""
        for issuer, jwks_uri in issuers:
            try:
                self.keys(issuer, jwks_uri)
            except Exception:  # best effort: the first request fetches them again
                continue


def forget() -> None:
    """Drop every cached key and discovered URL (tests)."""
    with _LOCK:
        _CACHE.clear()
        _JWKS_URI.clear()
        _FAILED.clear()
