"""The one path every surface takes to run an operation: authorize, run the service, shape the result."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio.to_thread

from engram.errors import EngramError
from engram.operations import Operation, OpInput
from engram.services.identity import Principal
from engram.services.memory import Progress
from engram.wiring import Engram

log = logging.getLogger("engram.dispatch")


async def run(
    engram: Engram, op: Operation, principal: Principal, args: OpInput, progress: Progress, transport: str = "http"
) -> Any:
    """Run `op` for `principal`. Returns a dict shaped by `op.output`, or text. Raises EngramError."""

    def work() -> Any:
        caller = engram.identity.enter(principal, args.context_id, op.principals, op.name, transport)
        return op.run(engram, caller, args, progress)

    trace = uuid.uuid4().hex
    try:
        result = await anyio.to_thread.run_sync(work)
    except EngramError:
        raise
    except Exception as exc:  # a fault of ours: log it whole, tell the caller little
        log.exception("operation %s failed (trace %s)", op.name, trace)
        raise EngramError(f"internal error (trace {trace})") from exc
    if op.output is None:
        return result
    if "traceId" in op.output.model_fields:
        result = dict(result, traceId=trace)
    return op.output.model_validate(result).model_dump(mode="json", by_alias=True)


def error_body(exc: EngramError) -> dict[str, Any]:
    return {"error": exc.to_dict()}
