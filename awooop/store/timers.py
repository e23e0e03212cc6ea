"""Statements on ``awooop_timer``: the due-timer sweep's claim-and-fire."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, text

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
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE awooop_timer t
-- expected_version -1 (a run deadline): valid whatever the run's version.
SET state = CASE WHEN t.expected_version < 0 OR r.version = t.expected_version
                 THEN 'FIRED' ELSE 'SKIPPED' END,
    claimed_by = :sweeper,
    fencing_token = t.fencing_token + 1,
    fired_at = now()
FROM due, awooop_run_state r
WHERE t.timer_id = due.timer_id AND r.run_id = t.run_id
RETURNING t.timer_id, t.run_id, t.kind, t.step, t.attempt, t.expected_version, t.state,
          t.fencing_token, extract(epoch FROM now() - t.due_at) AS late_by
"""
)


@dataclass(frozen=True)
class FiredTimer:
    timer_id: str
    run_id: uuid.UUID
    kind: str
    fired: bool  # False: skipped as stale
    fencing_token: int
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
            r.fencing_token,
            float(r.late_by),
            r.step,
            r.attempt,
            r.expected_version,
        )
        for r in rows
    ]
