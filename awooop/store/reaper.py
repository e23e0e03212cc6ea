"""The maintenance passes' statements on ``awooop_run_state``: the stale-run reaper
(ADR-114 D3) and the orphan sweep's marking of runs whose message was lost."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, text

from awooop.domain import states

states.check_transition(states.RUNNING, states.PENDING)
states.check_transition(states.RUNNING, states.FAILED)

# ADR-114 D3, both halves in one statement over disjoint rows: an expired lease goes back to
# PENDING while attempts remain, else FAILED. WAITING_* runs are never touched. The lock
# (SKIP LOCKED) makes two concurrent reapers take disjoint runs.
_REAP = text(
    """
WITH stale AS (
    SELECT run_id, worker_id, lease_epoch
    FROM awooop_run_state
    WHERE status = 'RUNNING' AND lease_until < now()
    ORDER BY lease_until
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
), requeued AS (
    UPDATE awooop_run_state r
    SET status = 'PENDING',
        lease_until = NULL,
        worker_id = NULL,
        reaped_at = now(),
        enqueued_at = now(),
        version = r.version + 1,
        updated_at = now()
    FROM stale s
    WHERE r.run_id = s.run_id AND r.attempt_count < r.max_attempts
    RETURNING r.run_id, r.project_id, r.attempt_count, s.worker_id AS lost_worker_id,
              s.lease_epoch, 'PENDING'::text AS to_status
), failed AS (
    UPDATE awooop_run_state r
    SET status = 'FAILED',
        failure_code = 'E-LEASE-001',
        failure_reason = 'Max retry attempts exceeded',
        lease_until = NULL,
        reaped_at = now(),
        finished_at = now(),
        version = r.version + 1,
        updated_at = now()
    FROM stale s
    WHERE r.run_id = s.run_id AND r.attempt_count >= r.max_attempts
    RETURNING r.run_id, r.project_id, r.attempt_count, s.worker_id AS lost_worker_id,
              s.lease_epoch, 'FAILED'::text AS to_status
), reaped AS (
    SELECT * FROM requeued UNION ALL SELECT * FROM failed
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
    SELECT run_id, 'lease', 'RUNNING', to_status, 'reaper', 'reap:' || lease_epoch, :actor,
           jsonb_build_object('lost_worker_id', lost_worker_id, 'attempt', attempt_count)
    FROM reaped
)
SELECT * FROM reaped
"""
)


@dataclass(frozen=True)
class Reaped:
    run_id: uuid.UUID
    project_id: str
    to_status: str
    attempt_count: int
    lost_worker_id: str | None


def reap(conn: Connection, actor: str, batch_size: int = 1000) -> list[Reaped]:
    """ADR-114 D3: reclaim RUNNING runs whose lease expired."""
    rows = conn.execute(_REAP, {"actor": actor, "batch_size": batch_size}).all()
    return [
        Reaped(r.run_id, r.project_id, r.to_status, r.attempt_count, r.lost_worker_id) for r in rows
    ]


_MARK_ORPHANS = text(
    """
WITH orphan AS (
    SELECT run_id
    FROM awooop_run_state
    WHERE status IN ('PENDING', 'RESUMED')
      AND available_at <= now()
      AND (lease_until IS NULL OR lease_until < now())
      AND control_state = 'ACTIVE'
      AND enqueued_at < now() - make_interval(secs => :older_than)
    ORDER BY available_at, created_at
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
)
UPDATE awooop_run_state r
SET enqueued_at = now()
FROM orphan o
WHERE r.run_id = o.run_id
RETURNING r.run_id, r.project_id
"""
)


def mark_orphans(conn: Connection, older_than: float, batch_size: int) -> list[uuid.UUID]:
    """Claimable runs whose last message is older than ``older_than`` s; marks them re-sent."""
    rows = conn.execute(_MARK_ORPHANS, {"older_than": older_than, "batch_size": batch_size})
    return [r.run_id for r in rows]
