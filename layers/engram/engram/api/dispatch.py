"""The one path every surface takes to run an operation: authorize, run the service, shape the result."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import anyio.to_thread

from engram.kernel.caller import Caller, Principal
from engram.kernel.errors import EngramError, Unavailable
from engram.kernel.metering import Cost, metering, tokens
from engram.kernel.observability import calls, metrics
from engram.kernel.operation import AnyOperation, OpInput
from engram.kernel.ports import Progress
from engram.trust.audit import id_arguments, objects
from engram.wiring import Engram

log = logging.getLogger("engram.dispatch")


async def run(
    engram: Engram,
    op: AnyOperation,
    principal: Principal,
    args: OpInput,
    progress: Progress,
    transport: str = "http",
    cost: Cost | None = None,
) -> Any:
    """Run `op` for `principal`: admitted by its quotas, metered into `cost` (what the caller is told it
    cost). Returns a dict shaped by `op.output`, or text. Raises EngramError."""

    entered: list[Caller] = []
    cost = cost if cost is not None else Cost()
    started = time.perf_counter()

    def work() -> Any:
        outcome, code, result = "error", "internal", None
        try:
            with metering(cost):
                caller = engram.identity.enter(principal, args.context_id, op.principals, op.name, transport)
                entered.append(caller)
                engram.audit.prime(caller.context_id)  # a cold instance reads the chain's head while the call runs
                ticket = engram.quotas.admit(caller.context_id, principal.key_id, op.writes(args), lambda: _size(args))
                try:
                    result = op.run(engram.family_services(op.family), caller, args, progress)
                except BaseException:
                    ticket.failed()
                    raise
                ticket.done(cost.embeddings)
            outcome, code = "ok", ""
            return result
        except EngramError as exc:
            code = exc.code
            raise
        finally:  # every call, reads and refusals included, in its context's audit trail (ids, never a payload)
            cost.server_ms = (time.perf_counter() - started) * 1000
            cost.tokens_in, cost.tokens_out = tokens(args.model_dump(mode="json", exclude_none=True)), tokens(result)
            where = entered[0].context_id if entered else args.context_id
            if where is None and len(principal.contexts) == 1:
                where = principal.contexts[0]
            if where in principal.contexts:  # never in the log of a context the key is not for
                engram.audit.record(
                    where,
                    principal.key_id,
                    principal.role,
                    op.name,
                    transport,
                    objects(id_arguments(args), result),
                    outcome,
                    code,
                    cost.figures(),
                )

    def record(ok: bool, code: str = "") -> None:  # in the call log of the caller's context, if it entered one
        where = (entered[0].context_id, principal.grant) if entered else (None, ())
        calls.record(op.name, (time.perf_counter() - started) * 1000, ok, code, *where)
        metrics.call(op.family, op.name, cost.server_ms, ok, cost.embeddings)

    trace = uuid.uuid4().hex
    try:
        result = await anyio.to_thread.run_sync(work)
    except EngramError as exc:
        record(False, exc.code)
        raise
    except Exception as exc:  # a fault of ours, or a store's: log it whole, tell the caller little
        record(False, "internal")
        log.exception("operation %s failed (trace %s)", op.name, trace)
        if storage_fault(exc):
            raise Unavailable(f"storage failed (trace {trace}); try again", code="storage_error") from exc
        raise EngramError(f"internal error (trace {trace})") from exc
    record(True)
    cost.server_ms = (time.perf_counter() - started) * 1000
    if op.output is None:
        return result
    if "traceId" in op.output.model_fields:
        result = dict(result, traceId=trace)
    return op.output.model_validate(result).model_dump(mode="json", by_alias=True)


def _size(args: OpInput) -> int:
    """The bytes of a call's arguments as JSON (what a write stores, for the stored-bytes quota)."""
    return len(json.dumps(args.model_dump(mode="json", exclude_none=True), ensure_ascii=False).encode())


# The packages whose exceptions mean a store failed (SQLite, DynamoDB / S3 through botocore, OpenSearch, the
# HTTP beneath them): named, not imported, so the API layer stays free of every adapter's SDK.
STORAGE_PACKAGES = ("sqlite3", "botocore", "boto3", "s3transfer", "opensearchpy", "urllib3")


def storage_fault(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) came from a storage client: Cortex's `storage_error`."""
    seen: BaseException | None = exc
    for _ in range(10):  # a chain is short; never follow a long (or looping) one
        if seen is None:
            return False
        if type(seen).__module__.split(".")[0] in STORAGE_PACKAGES:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
