"""Typed domain errors. One mapper per surface (MCP, REST) turns them into wire shapes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


class EngramError(Exception):
    """Base of every error an operation may raise on purpose."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, object]:
        # status: Spectron's field; code, message and details: Cortex's error shape
        return {"status": self.status, "code": self.code, "message": self.message, "details": dict(self.details)}


class InvalidInput(EngramError):
    status = 400
    code = "invalid_input"


class Unauthenticated(EngramError):
    status = 401
    code = "unauthenticated"
    # the protected resource metadata (RFC 9728) an HTTP 401 points to, set by the surface that knows its URL
    resource_metadata: str | None = None


class Forbidden(EngramError):
    status = 403
    code = "forbidden"


class NotFound(EngramError):
    status = 404
    code = "not_found"


class MethodNotAllowed(EngramError):
    status = 405
    code = "method_not_allowed"


class Conflict(EngramError):
    status = 409
    code = "conflict"


class PayloadTooLarge(EngramError):
    status = 413
    code = "payload_too_large"


class RateLimited(EngramError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None,
                 details: dict[str, object] | None = None) -> None:  # fmt: skip
        super().__init__(message, code=code, details={**(details or {}), "retry_after": retry_after})
        self.retry_after = retry_after


class Unavailable(EngramError):
    status = 503
    code = "unavailable"


@contextmanager
def embedding_errors() -> Iterator[None]:
    """A failing embedder (a model that would not load, Bedrock refusing) is Cortex's `embedding_error`:
    nothing was written, and the caller may try again."""
    try:
        yield
    except EngramError:
        raise
    except Exception as exc:
        logging.getLogger("engram").exception("embedding failed")
        raise Unavailable(f"embedding failed: {type(exc).__name__}", code="embedding_error") from exc
