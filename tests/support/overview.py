"""Runs and outbox messages written straight into the tables, in known statuses and at known
times (by the database clock), for the console's overview. Rows are inserted, never moved
from one status to another, so the test database's transition trigger has nothing to check.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Engine, text

# The saga status that goes with each run status in a seeded row.
SAGA = {
    "PENDING": "RUNNING",
    "RUNNING": "RUNNING",
    "WAITING_TOOL": "RUNNING",
    "WAITING_APPROVAL": "RUNNING",
    "RESUMED": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "COMPENSATED",
    "CANCELLED": "COMPENSATED",
}

_RUNS = text(
    """
WITH t AS (
    SELECT CASE WHEN CAST(:finished_ago AS int) IS NULL THEN NULL
                ELSE date_trunc('minute', now())
                     - make_interval(mins => CAST(:finished_ago AS int))
                     + make_interval(secs => CAST(:second AS int))
           END AS finished_at
)
INSERT INTO awooop_run_state
    (run_id, project_id, channel_type, workflow_name, workflow_version, workflow_digest,
     status, saga_status, current_step, input, failure_code, failure_reason, finished_at,
     created_at, updated_at)
SELECT gen_random_uuid(), :project_id, 'api', :workflow, 1, 'seeded', :status, :saga_status,
       :current_step, '{}'::jsonb, :failure_code, :failure_reason, t.finished_at,
       COALESCE(t.finished_at, now())
           - make_interval(mins => 1 + CAST(:waiting AS int), secs => i),
       COALESCE(t.finished_at, now() - make_interval(mins => CAST(:waiting AS int)))
FROM t, generate_series(1, :n) AS i
RETURNING run_id, finished_at
"""
)


def runs(
    engine: Engine,
    project_id: str,
    status: str,
    n: int = 1,
    *,
    finished_ago: int | None = None,
    second: int = 20,
    failure_code: str | None = None,
    saga_status: str | None = None,
    waiting_minutes: int = 0,
    workflow: str = "noop-3",
    current_step: str | None = None,
    failure_reason: str | None = None,
) -> list[tuple[uuid.UUID, datetime | None]]:
    """``n`` runs in ``status``; finished ``second`` s into the minute ``finished_ago``
    minutes before the current one, or unfinished and last changed ``waiting_minutes`` ago.
    Returns (run_id, finished_at) pairs."""
    params = {
        "project_id": project_id,
        "status": status,
        "saga_status": saga_status or SAGA[status],
        "failure_code": failure_code,
        "failure_reason": failure_reason,
        "finished_ago": finished_ago,
        "second": second,
        "waiting": waiting_minutes,
        "workflow": workflow,
        "current_step": current_step,
        "n": n,
    }
    with engine.begin() as conn:
        return [(r.run_id, r.finished_at) for r in conn.execute(_RUNS, params)]


def outbox(
    engine: Engine, project_id: str, run_id: uuid.UUID | None, status: str, n: int = 1
) -> None:
    """``n`` webhook messages of the run in ``status`` (PENDING, SENT or PARKED), created
    10, 20, … minutes ago; a PENDING one is not due before tomorrow (no sender takes it)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                """
INSERT INTO awooop_outbox
    (project_id, run_id, channel, purpose, payload, status, created_at, next_attempt_at)
SELECT :p, :r, 'webhook', 'run_outcome', '{"url": "http://127.0.0.1:9/hook", "body": {}}',
       :s, now() - make_interval(mins => 10 * i), now() + interval '1 day'
FROM generate_series(1, :n) AS i
"""
            ),
            {"p": project_id, "r": run_id, "s": status, "n": n},
        )
