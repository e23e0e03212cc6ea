"""Statements on ``awooop_timer`` — the due-timer sweep's claim-and-fire — and what a fired
timer does to its run (each applied in the same transaction as the firing)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store import interventions
from awooop.store.literals import sql_list, status_of_named_row

# Claim due timers (SKIP LOCKED: two sweeps take disjoint timers), and in the same statement
# mark each FIRED — or SKIPPED when its run moved on since it was set. A fired retry timer's
# effect is a nudge sent after commit; losing that nudge is covered by the orphan sweep.
_FIRE_DUE = text(
    """
WITH due AS (
    SELECT t.timer_id
    FROM awooop_timer t
    JOIN awooop_run_state r ON r.run_id = t.run_id
    -- A paused run's timers wait (deferred) until it is resumed.
    WHERE t.state = 'PENDING' AND t.due_at <= now() AND r.control_state = 'ACTIVE'
    ORDER BY t.due_at
    LIMIT :batch_size
    -- The run rows too, skipping any held: an operator locks the run, then its timers; a
    -- sweep that locked timers and then waited for their run would deadlock with it.
    FOR UPDATE OF t, r SKIP LOCKED
)
UPDATE awooop_timer t
-- expected_version -1 (a run deadline): valid whatever the run's version.
SET state = CASE WHEN t.expected_version < 0 OR r.version = t.expected_version
                 THEN 'FIRED' ELSE 'SKIPPED' END,
    claimed_by = :sweeper,
    fired_at = now()
FROM due, awooop_run_state r
WHERE t.timer_id = due.timer_id AND r.run_id = t.run_id
RETURNING t.timer_id, t.run_id, t.kind, t.step, t.attempt, t.expected_version, t.state,
          extract(epoch FROM now() - t.due_at) AS late_by
"""
)


@dataclass(frozen=True)
class FiredTimer:
    timer_id: str
    run_id: uuid.UUID
    kind: str
    fired: bool  # False: skipped as stale
    late_by: float
    step: str | None = None
    attempt: int | None = None
    expected_version: int = 0


def fire_due(conn: Connection, sweeper: str, batch_size: int) -> list[FiredTimer]:
    rows = conn.execute(_FIRE_DUE, {"sweeper": sweeper, "batch_size": batch_size})
    return [
        FiredTimer(
            r.timer_id,
            r.run_id,
            r.kind,
            r.state == "FIRED",
            float(r.late_by),
            r.step,
            r.attempt,
            r.expected_version,
        )
        for r in rows
    ]


# The tool timeout timer fired: the missing result is a transient failure of that attempt,
# if the run still waits for it — its call the step's latest. (Not the run's version: a cancel
# or the run deadline applied in the same sweep batch moves it, and the run keeps waiting.)
_TIME_OUT = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state r
    SET saga_steps = r.saga_steps || jsonb_build_array(jsonb_build_object(
            'phase', 'tool_result', 'step', CAST(:step AS text), 'attempt', :attempt,
            'status', 'FAILED', 'error', 'no tool result within the timeout',
            'recorded_at', now())),
        status = 'PENDING',
        available_at = now(),
        enqueued_at = now(),
        version = r.version + 1,
        updated_at = now()
    WHERE r.run_id = :run_id AND {status_of_named_row(["WAITING_TOOL"], "r.status")}
      AND r.current_step = :step
      AND (SELECT max((e ->> 'attempt')::int) FROM jsonb_array_elements(r.saga_steps) e
           WHERE e ->> 'step' = :step AND e ->> 'status' = 'DISPATCHED') = :attempt
    RETURNING r.run_id
)
INSERT INTO awooop_run_event (run_id, kind, from_status, to_status, trigger, trigger_id, detail)
SELECT run_id, 'transition', 'WAITING_TOOL', 'PENDING', 'timer', :timer_id,
       jsonb_build_object('timeout', 'tool_result', 'step', CAST(:step AS text))
FROM changed
"""
)


# A step overran its timeout and may still be running: its outcome is unknown. Record that,
# take the run from the (possibly hung) worker — bumping lease_epoch fences its late writes —
# and make it claimable; the next worker resolves the step or hands it to a person.
_TIME_OUT_STEP = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state r
    SET saga_steps = r.saga_steps || jsonb_build_array(jsonb_build_object(
            'phase', 'forward', 'step', CAST(:step AS text), 'attempt', :attempt,
            'status', 'UNKNOWN', 'error', 'the step overran its timeout',
            'lease_epoch', r.lease_epoch, 'worker_id', r.worker_id, 'recorded_at', now())),
        status = 'PENDING',
        lease_until = NULL,
        worker_id = NULL,
        lease_epoch = r.lease_epoch + 1,
        available_at = now(),
        enqueued_at = now(),
        version = r.version + 1,
        updated_at = now()
    WHERE r.run_id = :run_id AND {status_of_named_row(["RUNNING"], "r.status")}
      AND r.version = :expected_version
      AND r.current_step = :step
      AND NOT EXISTS (
          SELECT 1 FROM jsonb_array_elements(r.saga_steps) e
          WHERE e ->> 'phase' = 'forward' AND e ->> 'step' = :step
            AND (e ->> 'attempt')::int = :attempt)
    RETURNING r.run_id
)
INSERT INTO awooop_run_event (run_id, kind, from_status, to_status, trigger, trigger_id, detail)
SELECT run_id, 'lease', 'RUNNING', 'PENDING', 'timer', :timer_id,
       jsonb_build_object('timeout', 'step', 'step', CAST(:step AS text))
FROM changed
"""
)


# The workflow's run deadline passed: a run still going forward turns back, like a cancel,
# and ends FAILED (E-SAGA-003) after compensating. A run already compensating, waiting for a
# person, or finished is left alone. A run waiting for a tool result keeps waiting for it (or
# its timeout, kept armed): the result says whether the call is compensated.
_DEADLINE_PASSED = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state r
    SET saga_status = 'CANCELLING',
        failure_code = 'E-SAGA-003',
        failure_reason = 'the run deadline passed',
        status = CASE WHEN r.status = 'WAITING_APPROVAL' THEN 'RESUMED' ELSE r.status END,
        attempt_count = CASE WHEN r.status = 'RUNNING' THEN r.attempt_count ELSE 0 END,
        available_at = now(),
        enqueued_at = now(),
        version = r.version + 1,
        updated_at = now()
    WHERE r.run_id = :run_id
      AND r.status NOT IN ({sql_list(states.TERMINAL_STATUSES)})
      AND r.saga_status IN ('RUNNING', 'WAITING_RESOLUTION')
    RETURNING r.run_id, r.status, r.version
), superseded AS ({interventions.SUPERSEDE_PENDING}
), rearmed AS (
    -- The timers valid until this statement bumped the version that must stay so: the
    -- awaited tool result's timeout, and the step timeout of the step running now (a
    -- handler that hangs never reaches the step boundary where the deadline is seen, so
    -- only its timeout can take the run from it).
    UPDATE awooop_timer tm SET expected_version = c.version
    FROM changed c
    WHERE tm.run_id = c.run_id AND tm.state = 'PENDING' AND tm.expected_version = c.version - 1
      AND ((tm.kind = 'tool_timeout' AND c.status = 'WAITING_TOOL')
           OR tm.kind = 'step_timeout')
)
INSERT INTO awooop_run_event (run_id, kind, to_status, trigger, trigger_id, detail)
SELECT run_id, 'saga', status, 'timer', :timer_id,
       jsonb_build_object('saga_status', 'CANCELLING', 'failure_code', 'E-SAGA-003')
FROM changed
"""
)


def _apply(conn: Connection, statement: Any, t: FiredTimer) -> bool:
    params = {
        "run_id": t.run_id,
        "step": t.step,
        "attempt": t.attempt,
        "expected_version": t.expected_version,
        "timer_id": t.timer_id,
        "via": "timer",
    }
    return conn.execute(statement, params).rowcount == 1


def tool_timed_out(conn: Connection, t: FiredTimer) -> bool:
    """The tool result did not come: False when the run had moved on (the result won)."""
    return _apply(conn, _TIME_OUT, t)


def step_timed_out(conn: Connection, t: FiredTimer) -> bool:
    """The step overran: False when it had finished (or the run moved on)."""
    return _apply(conn, _TIME_OUT_STEP, t)


def deadline_passed(conn: Connection, t: FiredTimer) -> bool:
    """The run deadline passed: False when the run was not going forward any more."""
    return _apply(conn, _DEADLINE_PASSED, t)


_NEXT_DUE = text(
    "SELECT extract(epoch FROM min(due_at) - now())::float8 AS due_in FROM awooop_timer"
    " WHERE run_id = :run_id AND state = 'PENDING'"
)


def next_due_in(conn: Connection, run_id: uuid.UUID) -> float | None:
    """Seconds (by the database's clock; negative when overdue) until the run's next pending
    timer falls due, or None when it has none."""
    due_in = conn.execute(_NEXT_DUE, {"run_id": run_id}).scalar_one()
    return None if due_in is None else float(due_in)


from awooop.store import approvals  # noqa: E402 - approvals needs FiredTimer from here

APPROVAL_EXPIRY = "approval_expiry"

# What a fired timer does to its run, beyond the nudge (retry wake-ups and resolver polls
# are only a nudge). False: the run had moved on, nothing to do.
EFFECTS: dict[str, Callable[[Connection, FiredTimer], bool]] = {
    "tool_timeout": tool_timed_out,
    "step_timeout": step_timed_out,
    "deadline": deadline_passed,
    APPROVAL_EXPIRY: approvals.expire,
}
