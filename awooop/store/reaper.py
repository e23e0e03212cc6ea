"""The maintenance passes' statements on ``awooop_run_state``: the stale-run reaper (expired
leases, and runs of workers judged dead by :mod:`awooop.engine.watch`), the liveness tokens
that judgement reads, and the orphan sweep's marking of runs whose message was lost."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store.literals import status_of_named_row

states.check_transition(states.RUNNING, states.PENDING)
states.check_transition(states.RUNNING, states.FAILED)

# The failure code of a run whose attempts ran out with its workers dying.
EXHAUSTED = "E-LEASE-001"

# A stale RUNNING run goes back to PENDING while attempts remain, else FAILED: both halves in
# one statement over disjoint rows. WAITING_* runs are never touched. The lock (SKIP LOCKED)
# makes two concurrent reapers take disjoint runs.
#
# Each stale run found is then moved by its primary key (the status compared as text: see
# status_of_named_row); compared plainly, statistics that count few running runs make both
# updates read every running run again and compare it with every stale run found.
#
# A run is stale when its lease expired ('lease_expired', the database's clock), or when its
# holder is one the caller judged dead ('worker_dead': :dead_ids, each with the liveness token
# it saw unchanged for long enough) and the holder's row still holds that token. The row is
# stamped judged_dead_at in the same statement: a beat that committed first saves the worker
# (the compare-and-set on the token fails), and a beat that comes after reads the stamp and
# tells its worker that the leases it held are gone.
_RUNNING_HERE = status_of_named_row([states.RUNNING], "r.status")
_REAP = text(
    f"""
WITH dead AS (
    SELECT * FROM unnest(CAST(:dead_ids AS text[]), CAST(:dead_tokens AS timestamptz[]))
        AS d(worker_id, token)
), judged AS (
    UPDATE awooop_worker w
    SET judged_dead_at = now()
    FROM dead d
    WHERE w.worker_id = d.worker_id AND w.seen_at = d.token
    RETURNING w.worker_id, w.seen_at
), stale AS (
    SELECT r.run_id, r.worker_id, r.lease_epoch,
           CASE WHEN r.lease_until < now() THEN 'lease_expired' ELSE 'worker_dead' END
               AS reason,
           j.seen_at AS worker_seen_at
    FROM awooop_run_state r
    LEFT JOIN judged j ON j.worker_id = r.worker_id
    WHERE r.status = 'RUNNING'
      AND (r.lease_until < now() OR j.worker_id IS NOT NULL)
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
    WHERE r.run_id = s.run_id AND r.lease_epoch = s.lease_epoch AND {_RUNNING_HERE}
      AND r.attempt_count < r.max_attempts
    RETURNING r.run_id, r.project_id, r.attempt_count, s.worker_id AS lost_worker_id,
              s.lease_epoch, 'PENDING'::text AS to_status, s.reason, s.worker_seen_at,
              r.workflow_name, extract(epoch FROM now() - r.created_at)::float8 AS age
), failed AS (
    UPDATE awooop_run_state r
    SET status = 'FAILED',
        failure_code = :exhausted_code,
        failure_reason = 'Max retry attempts exceeded',
        lease_until = NULL,
        reaped_at = now(),
        finished_at = now(),
        version = r.version + 1,
        updated_at = now()
    FROM stale s
    WHERE r.run_id = s.run_id AND r.lease_epoch = s.lease_epoch AND {_RUNNING_HERE}
      AND r.attempt_count >= r.max_attempts
    RETURNING r.run_id, r.project_id, r.attempt_count, s.worker_id AS lost_worker_id,
              s.lease_epoch, 'FAILED'::text AS to_status, s.reason, s.worker_seen_at,
              r.workflow_name, extract(epoch FROM now() - r.created_at)::float8 AS age
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
    workflow_name: str = ""
    # Seconds since the run's admission (its duration, when it failed here).
    age_seconds: float = 0.0


def reap(
    conn: Connection,
    actor: str,
    batch_size: int = 1000,
    dead: Mapping[str, datetime] | None = None,
) -> list[Reaped]:
    """Reclaim RUNNING runs whose lease expired, or whose holder is in ``dead`` (worker id →
    the liveness token judged stale) and has not beaten since."""
    dead = dead or {}
    params = {
        "actor": actor,
        "exhausted_code": EXHAUSTED,
        "batch_size": batch_size,
        "dead_ids": list(dead),
        "dead_tokens": list(dead.values()),
    }
    rows = conn.execute(_REAP, params).all()
    return [
        Reaped(
            r.run_id,
            r.project_id,
            r.to_status,
            r.attempt_count,
            r.lost_worker_id,
            r.reason,
            r.workflow_name,
            r.age,
        )
        for r in rows
    ]


# The liveness tokens of the workers holding RUNNING runs, with what identifies the database
# server that answered (a restart or a failover changes it).
_TOKENS = text(
    """
SELECT current_database() || '@' || pg_postmaster_start_time()::text AS server,
       w.worker_id, w.seen_at
FROM (SELECT 1) AS one
LEFT JOIN awooop_worker w
       ON w.worker_id IN (SELECT worker_id FROM awooop_run_state WHERE status = 'RUNNING')
"""
)


@dataclass(frozen=True)
class Tokens:
    server: str
    seen: dict[str, datetime]


def liveness_tokens(conn: Connection) -> Tokens:
    """Each holder's liveness token (its row's ``seen_at``, which every beat changes), and
    which server answered."""
    rows = conn.execute(_TOKENS).all()
    return Tokens(rows[0].server, {r.worker_id: r.seen_at for r in rows if r.worker_id})


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
