"""Operators' management operations on a run, each one statement.

Every operation is idempotent by its ``operation_id``: the audit row it writes
(``awooop_run_event``, trigger ``operator``) is unique per run and operation id, and an id
already recorded is answered as a replay without a second effect. Each checks its
precondition and, when given, the run's ``version`` (compare-and-set) in its WHERE clause.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from awooop.domain import states
from awooop.store.literals import sql_list

_TERMINAL = f"({sql_list(states.TERMINAL_STATUSES)})"

# name -> (SET assignments, precondition on the current row t)
OPERATIONS: dict[str, tuple[str, str]] = {
    "pause": (
        "control_state = 'PAUSED'",
        f"t.control_state = 'ACTIVE' AND t.status NOT IN {_TERMINAL}",
    ),
    "resume": (
        "control_state = 'ACTIVE', enqueued_at = now()",
        "t.control_state = 'PAUSED'",
    ),
    # A running run turns back at its next step boundary; one waiting for a person is
    # resumed so a worker can compensate it. One waiting for a tool result keeps waiting
    # (its timeout stays armed): the result says whether the call happened, and so whether
    # it is compensated.
    "cancel": (
        "saga_status = 'CANCELLING', failure_code = 'E-SAGA-002',"
        " status = CASE WHEN t.status = 'WAITING_APPROVAL' THEN 'RESUMED' ELSE t.status END,"
        " attempt_count = CASE WHEN t.status = 'RUNNING' THEN r.attempt_count ELSE 0 END,"
        " available_at = now(), enqueued_at = now()",
        f"t.status NOT IN {_TERMINAL} AND t.saga_status IN ('RUNNING', 'WAITING_RESOLUTION')",
    ),
    "retry_compensation": (
        "status = 'RESUMED', saga_status = 'COMPENSATING', attempt_count = 0,"
        " available_at = now(), enqueued_at = now(),"
        " saga_steps = r.saga_steps || jsonb_build_array(jsonb_build_object("
        "'phase', 'reset', 'operation_id', CAST(:operation_id AS text), 'recorded_at', now()))",
        "t.saga_status = 'MANUAL_INTERVENTION' AND t.direction = 'BACKWARD'"
        " AND t.status = 'WAITING_APPROVAL'",
    ),
    # A step whose outcome a cancel (or the deadline) was waiting for goes back to the
    # cancel: once resolved, the saga turns back.
    "retry_resolution": (
        "status = 'RESUMED', attempt_count = 0,"
        " saga_status = CASE WHEN t.failure_code IN ('E-SAGA-002', 'E-SAGA-003')"
        " THEN 'CANCELLING' ELSE 'WAITING_RESOLUTION' END,"
        " available_at = now(), enqueued_at = now(),"
        " saga_steps = r.saga_steps || jsonb_build_array(jsonb_build_object("
        "'phase', 'reset', 'operation_id', CAST(:operation_id AS text), 'recorded_at', now()))",
        "t.saga_status = 'MANUAL_INTERVENTION' AND t.direction = 'FORWARD'"
        " AND t.status = 'WAITING_APPROVAL'",
    ),
    "manual_close": (
        "status = 'CANCELLED', saga_status = 'MANUALLY_CLOSED', lease_until = NULL,"
        " finished_at = now()",
        "t.saga_status = 'MANUAL_INTERVENTION' AND t.status = 'WAITING_APPROVAL'",
    ),
}

_TEMPLATE = """
WITH prior AS (
    SELECT seq, detail ->> 'operation' AS operation FROM awooop_run_event
    WHERE run_id = :run_id AND trigger = 'operator' AND trigger_id = :operation_id
), target AS (
    SELECT run_id, status, saga_status, control_state, direction, version, failure_code
    FROM awooop_run_state
    WHERE run_id = :run_id AND project_id = :project_id
    FOR UPDATE
), changed AS (
    UPDATE awooop_run_state r
    SET {assignments}, version = r.version + 1, updated_at = now()
    FROM target t
    WHERE r.run_id = t.run_id
      AND NOT EXISTS (SELECT 1 FROM prior)
      AND (CAST(:expected_version AS bigint) IS NULL
           OR t.version = CAST(:expected_version AS bigint))
      AND ({precondition})
    RETURNING r.run_id, t.status AS from_status, r.status AS to_status, r.version,
              t.version AS from_version, r.saga_status, r.control_state
), rearmed AS (
    -- Pause and resume do not move the saga: its pending timers (deferred while paused)
    -- stay valid at the new version. A run still waiting for a tool result keeps that
    -- result's timeout (the one valid until now, not a stale one of an earlier attempt).
    -- So does the step timeout of the step running now, whatever the operation: a handler
    -- that hangs never reaches the step boundary where a cancel is seen, so only its
    -- timeout can take the run from it.
    UPDATE awooop_timer tm SET expected_version = c.version
    FROM changed c
    WHERE tm.run_id = c.run_id AND tm.state = 'PENDING'
      AND (CAST(:operation AS text) IN ('pause', 'resume')
           OR (tm.kind = 'tool_timeout' AND c.to_status = 'WAITING_TOOL'
               AND tm.expected_version = c.from_version)
           OR (tm.kind = 'step_timeout' AND tm.expected_version = c.from_version))
), settled AS (
    -- The run stops waiting: its pending intervention is this operator's decision (retry:
    -- approved, manual close: rejected); a pending approval is superseded.
    UPDATE awooop_approval a
    SET status = CASE WHEN a.kind = 'approval' THEN 'SUPERSEDED'
                      WHEN CAST(:operation AS text) = 'manual_close' THEN 'REJECTED'
                      ELSE 'APPROVED' END,
        decided_by = :actor, decided_via = 'operator', decided_at = now(), comment = :reason
    FROM changed c
    WHERE a.run_id = c.run_id AND a.status = 'PENDING'
      AND c.from_status = 'WAITING_APPROVAL' AND c.to_status <> 'WAITING_APPROVAL'
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
    SELECT run_id, 'management', from_status, to_status, 'operator', :operation_id, :actor,
           jsonb_build_object('operation', CAST(:operation AS text),
                              'reason', CAST(:reason AS text))
    FROM changed
)
SELECT COALESCE(c.to_status, t.status) AS status,
       COALESCE(c.saga_status, t.saga_status) AS saga_status,
       COALESCE(c.control_state, t.control_state) AS control_state,
       COALESCE(c.version, t.version) AS version,
       EXISTS (SELECT 1 FROM prior) AS replayed,
       (SELECT operation FROM prior LIMIT 1) AS prior_operation,
       c.run_id IS NOT NULL AS applied
FROM target t LEFT JOIN changed c ON c.run_id = t.run_id
"""

_STATEMENTS = {
    name: text(_TEMPLATE.format(assignments=assignments, precondition=precondition))
    for name, (assignments, precondition) in OPERATIONS.items()
}


@dataclass(frozen=True)
class OperationResult:
    """``applied``: this call changed the run. ``replayed``: the id was already applied."""

    applied: bool
    replayed: bool
    status: str
    saga_status: str
    control_state: str
    version: int
    # When replayed: the operation the id was first used for.
    prior_operation: str | None = None


class RunNotFound(LookupError):
    pass


def apply(
    conn: Connection,
    operation: str,
    project_id: str,
    run_id: uuid.UUID | str,
    operation_id: str,
    actor: str,
    reason: str,
    expected_version: int | None = None,
) -> OperationResult:
    params = {
        "run_id": run_id,
        "project_id": project_id,
        "operation_id": operation_id,
        "operation": operation,
        "actor": actor,
        "reason": reason,
        "expected_version": expected_version,
    }
    try:
        row = conn.execute(_STATEMENTS[operation], params).first()
    except IntegrityError:
        # The same operation id applied concurrently: the other call's effect stands.
        conn.rollback()
        row = conn.execute(_STATEMENTS[operation], params).first()
    if row is None:
        raise RunNotFound(str(run_id))
    return OperationResult(
        applied=row.applied,
        replayed=row.replayed,
        status=row.status,
        saga_status=row.saga_status,
        control_state=row.control_state,
        version=row.version,
        prior_operation=row.prior_operation,
    )
