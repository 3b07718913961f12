"""The one path every surface takes to run an operation: authorize, run the service, shape the result."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import anyio.to_thread

from engram.kernel.caller import Caller, Principal
from engram.kernel.errors import EngramError, Unavailable
from engram.kernel.load import give_way, giving_way
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
    finish: Callable[[Any], Any] | None = None,
) -> Any:
    """Run `op` for `principal`: admitted by its quotas, metered into `cost` (what the caller is told it
    cost). Returns a dict shaped by `op.output`, or text — or what `finish` makes of it (in the call's slot and
    thread: a transport's encoding of a long result is the call's work, not the event loop's). Raises
    EngramError."""
    call = Call(engram, op, principal, args, transport, cost if cost is not None else Cost())
    # in one of the server's slots, a free one going to the context running the fewest (engram.trust.fair)
    ctx = args.context_id or (principal.contexts[0] if len(principal.contexts) == 1 else None)
    lane = f"c:{ctx}" if ctx in principal.contexts else f"k:{principal.key_id}"  # (a context it may not enter: its key)
    # a read gives way to a lighter context's call at points where it holds no lock (a write holds its context's)
    way = None if op.writes(args) else engram.share.way(lane)
    try:
        async with engram.share.turn(lane):
            result = await anyio.to_thread.run_sync(call.work, progress, way, finish)
    except EngramError as exc:
        call.logged(False, exc.code)
        raise
    except Exception as exc:  # a fault of ours, or a store's: log it whole, tell the caller little
        call.logged(False, "internal")
        log.exception("operation %s failed (trace %s)", op.name, call.trace)
        if storage_fault(exc):
            raise Unavailable(f"storage failed (trace {call.trace}); try again", code="storage_error") from exc
        raise EngramError(f"internal error (trace {call.trace})") from exc
    call.logged(True)
    return result


class Call:
    """One run of an operation: who entered which context, what it cost, and its trail (audit entry, call log,
    metrics) whatever its outcome."""

    def __init__(
        self, engram: Engram, op: AnyOperation, principal: Principal, args: OpInput, transport: str, cost: Cost
    ) -> None:
        self.engram, self.op, self.principal, self.args, self.transport, self.cost = (
            engram, op, principal, args, transport, cost,
        )  # fmt: skip
        self.caller: Caller | None = None  # once the principal has entered the call's context
        self.started = time.perf_counter()
        self.trace = uuid.uuid4().hex

    def work(
        self, progress: Progress, way: Callable[[], None] | None = None, finish: Callable[[Any], Any] | None = None
    ) -> Any:
        """Enter, admit, run (in a worker thread; a read giving `way` where it may); every call, reads and refusals
        included, audited. The result shaped, then `finish`ed."""
        with giving_way(way) if way is not None else nullcontext():
            result = self._work(progress)
            give_way()
            result = self.shaped(result)
            give_way()
            return result if finish is None else finish(result)

    def _work(self, progress: Progress) -> Any:
        engram, op, args = self.engram, self.op, self.args
        outcome, code, result = "error", "internal", None
        try:
            with metering(self.cost):
                self.caller = engram.identity.enter(self.principal, args.context_id, op.principals, op.name,
                                                    self.transport)  # fmt: skip
                engram.audit.prime(self.caller.context_id)  # a cold instance reads the chain's head meanwhile
                ticket = engram.quotas.admit(
                    self.caller.context_id, self.principal.key_id, op.writes(args), lambda: _size(args)
                )
                give_way()
                try:
                    result = op.run(engram.family_services(op.family), self.caller, args, progress)
                except BaseException:
                    ticket.failed()
                    raise
                ticket.done(self.cost.embeddings)
            outcome, code = "ok", ""
            return result
        except EngramError as exc:
            code = exc.code
            raise
        finally:
            self.audited(outcome, code, result)

    def audited(self, outcome: str, code: str, result: Any) -> None:
        """The call in its context's audit trail (ids, never a payload) — never in a context the key is not for."""
        give_way()
        cost, args, principal = self.cost, self.args, self.principal
        cost.server_ms = (time.perf_counter() - self.started) * 1000
        cost.tokens_in, cost.tokens_out = tokens(args.model_dump(mode="json", exclude_none=True)), tokens(result)
        where = self.caller.context_id if self.caller is not None else args.context_id
        if where is None and len(principal.contexts) == 1:
            where = principal.contexts[0]
        if where in principal.contexts:
            self.engram.audit.record(
                where,
                key_id=principal.key_id,
                principal=principal.role,
                tool=self.op.name,
                transport=self.transport,
                objects_=objects(id_arguments(args), result),
                outcome=outcome,
                code=code,
                cost=cost.figures(),
            )

    def logged(self, ok: bool, code: str = "") -> None:
        """In the call log of the caller's context (if it entered one), and the metrics."""
        op, cost = self.op, self.cost
        where = (self.caller.context_id, self.principal.grant) if self.caller is not None else (None, ())
        calls.record(op.name, (time.perf_counter() - self.started) * 1000, ok, code, *where)
        metrics.call(op.family, op.name, cost.server_ms, ok, cost.embeddings)
        if ok:
            cost.server_ms = (time.perf_counter() - self.started) * 1000

    def shaped(self, result: Any) -> Any:
        """The result as the operation's output model says (with this call's trace id where it has one), or text."""
        output = self.op.output
        if output is None:
            return result
        if "traceId" in output.model_fields:
            result = dict(result, traceId=self.trace)
        return output.model_validate(result).model_dump(mode="json", by_alias=True)


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
