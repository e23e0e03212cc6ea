"""Steering runs: pause, resume, cancel, retry compensation, retry resolution, manual close.

The engine API behind the operator surface. Each call is idempotent by ``operation_id``
(the same id twice is one effect and one audit row), optionally checked against the run's
``version``, and recorded with its actor and reason. A refused operation raises the error
the HTTP layer answers with (404, 409, 412); it changes nothing.

A paused run takes no automatic action: claims skip it, its timers wait, and a worker holding
it stops at the next step boundary. A cancel turns the saga back at the next step boundary
(or at once when no worker holds it) and ends CANCELLED after compensating; a step whose
outcome is in doubt is settled first (its resolver, its tool result, or a person), and only
the steps that happened are compensated.
"""

from __future__ import annotations

import logging
import uuid

from sqlalchemy import Engine

from awooop import errors, metrics
from awooop.config import Settings
from awooop.domain import states
from awooop.store import operations

log = logging.getLogger("awooop.engine.management")

OPERATIONS = tuple(operations.OPERATIONS)
# After these, the run may be claimable and needs a nudge (the caller sends it).
NUDGING = frozenset({"resume", "cancel", "retry_compensation", "retry_resolution"})


def operate(
    engine: Engine,
    settings: Settings,
    operation: str,
    project_id: str,
    run_id: uuid.UUID | str,
    *,
    operation_id: str,
    actor: str,
    reason: str = "",
    expected_version: int | None = None,
) -> operations.OperationResult:
    if operation not in operations.OPERATIONS:
        raise errors.InvalidOperation(f"unknown operation {operation!r}; one of {OPERATIONS}")
    if not (0 < len(operation_id) <= 128) or not actor:
        raise errors.InvalidOperation("operation_id (1-128 characters) and actor are required")
    if operation == "manual_close" and not settings.manual_close_enabled:
        raise errors.ManualCloseDisabled()
    with engine.connect() as conn:
        try:
            result = operations.apply(
                conn,
                operation,
                project_id,
                run_id,
                operation_id,
                actor,
                reason[:1000],
                expected_version,
            )
        except operations.RunNotFound:
            raise errors.NotFound("no such run in this project") from None
    fields = {
        "run_id": str(run_id),
        "project_id": project_id,
        "operation": operation,
        "operation_id": operation_id,
        "actor": actor,
    }
    if result.replayed and result.prior_operation != operation:
        raise errors.OperationIdReused(
            f"operation_id {operation_id!r} was already used for {result.prior_operation}"
        )
    if result.replayed:
        log.info("operation already applied", extra={**fields, "action": "operation_replayed"})
        return result
    if not result.applied:
        if expected_version is not None and result.version != expected_version:
            raise errors.VersionMismatch(
                f"run is at version {result.version}, not {expected_version}"
            )
        raise errors.OperationRefused(
            f"cannot {operation} a run that is {result.status} / {result.saga_status} / "
            f"{result.control_state}"
        )
    if result.status in states.TERMINAL_STATUSES:  # manual close
        metrics.RUNS_FINISHED.labels(result.status).inc()
    log.info(
        "operation applied", extra={**fields, "action": f"run_{operation}", "status": result.status}
    )
    return result
