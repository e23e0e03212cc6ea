"""The maintenance passes' statements on ``awooop_run_state``: the stale-run reaper
(ADR-114 D3, and runs of dead workers) and the orphan sweep's marking of runs whose message
was lost."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, text

from awooop.domain import states

states.check_transition(states.RUNNING, states.PENDING)
states.check_transition(states.RUNNING, states.FAILED)

# ADR-114 D3, both halves in one statement over disjoint rows: a stale RUNNING run goes back
# to PENDING while attempts remain, else FAILED. WAITING_* runs are never touched. The lock
# (SKIP LOCKED) makes two concurrent reapers take disjoint runs.
#
# A run is stale when its lease expired ('lease_expired'), or when its holder's liveness row
# (awooop_worker, renewed by the worker's lease keeper every few seconds) is older than
# :worker_dead_after ('worker_dead'): the process is gone, however long its lease still runs.
# A holder with no liveness row (a worker of an older version) is judged by its lease alone.
_REAP = text(
    """
WITH stale AS (
    SELECT r.run_id, r.worker_id, r.lease_epoch,
           CASE WHEN r.lease_until < now() THEN 'lease_expired' ELSE 'worker_dead' END
               AS reason,
           w.seen_at AS worker_seen_at
    FROM awooop_run_state r
    LEFT JOIN awooop_worker w ON w.worker_id = r.worker_id
    WHERE r.status = 'RUNNING'
      AND (r.lease_until < now()
           OR (w.seen_at < now() - make_interval(secs => :worker_dead_after)
               -- a database that restarted within that time could not take liveness
               -- beats: every worker looks dead then, and none is judged by it
               AND pg_postmaster_start_time() < now() - make_interval(secs => :worker_dead_after)))
    ORDER BY r.lease_until
    LIMIT :batch_size
    FOR UPDATE OF r SKIP LOCKED
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
    WHERE r.run_id = s.run_id AND r.lease_epoch = s.lease_epoch AND r.status = 'RUNNING'
      AND r.attempt_count < r.max_attempts
    RETURNING r.run_id, r.project_id, r.attempt_count, s.worker_id AS lost_worker_id,
              s.lease_epoch, 'PENDING'::text AS to_status, s.reason, s.worker_seen_at
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
    WHERE r.run_id = s.run_id AND r.lease_epoch = s.lease_epoch AND r.status = 'RUNNING'
      AND r.attempt_count >= r.max_attempts
    RETURNING r.run_id, r.project_id, r.attempt_count, s.worker_id AS lost_worker_id,
              s.lease_epoch, 'FAILED'::text AS to_status, s.reason, s.worker_seen_at
), reaped AS (
    SELECT * FROM requeued UNION ALL SELECT * FROM failed
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
    SELECT run_id, 'lease', 'RUNNING', to_status, 'reaper', 'reap:' || lease_epoch, :actor,
           jsonb_build_object('lost_worker_id', lost_worker_id, 'attempt', attempt_count,
                              'reason', reason, 'worker_seen_at', worker_seen_at)
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
    # Why: 'lease_expired', or 'worker_dead' (its holder's liveness row went stale).
    reason: str = "lease_expired"


# Settings().worker_dead_after_seconds; callers pass the configured value.
DEFAULT_WORKER_DEAD_AFTER = 20.0


def reap(
    conn: Connection,
    actor: str,
    batch_size: int = 1000,
    worker_dead_after: float = DEFAULT_WORKER_DEAD_AFTER,
) -> list[Reaped]:
    """ADR-114 D3: reclaim RUNNING runs whose lease expired or whose worker is dead (its
    liveness row is older than ``worker_dead_after`` seconds)."""
    params = {"actor": actor, "batch_size": batch_size, "worker_dead_after": worker_dead_after}
    rows = conn.execute(_REAP, params).all()
    return [
        Reaped(r.run_id, r.project_id, r.to_status, r.attempt_count, r.lost_worker_id, r.reason)
        for r in rows
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
