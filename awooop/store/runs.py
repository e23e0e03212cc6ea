"""Reading runs: one run by project, and the workflow definitions unfinished runs use.

The statements that move a run live with their owner: the lease (:mod:`awooop.store.leases`),
a worker's segment writes (:mod:`awooop.store.segments`), the reaper and orphan sweep
(:mod:`awooop.store.reaper`), operators' operations (:mod:`awooop.store.operations`), timers
(:mod:`awooop.store.timers`), approvals and tool results.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store import jsonb
from awooop.store.literals import sql_list

_GET_RUN = text(
    """
SELECT run_id, project_id, channel_type, workflow_name, workflow_version, status, saga_status,
       direction, current_step, CAST(input AS text) AS input, CAST(output AS text) AS output,
       attempt_count, max_attempts, lease_until, heartbeat_at, worker_id, lease_epoch,
       failure_code,
       failure_reason, CAST(saga_steps AS text) AS saga_steps, version, control_state,
       created_at, updated_at, finished_at, rerun_of, rerun_key, tags,
       (SELECT CAST(COALESCE(jsonb_agg(jsonb_build_object(
                    'run_id', c.run_id, 'status', c.status, 'created_at', c.created_at)
                    ORDER BY c.created_at, c.run_id), '[]'::jsonb) AS text)
        FROM (SELECT run_id, status, created_at FROM awooop_run_state
              WHERE rerun_of = r.run_id AND project_id = r.project_id
              ORDER BY created_at, run_id
              LIMIT :max_reruns) c) AS reruns
FROM awooop_run_state r
WHERE run_id = :run_id AND project_id = :project_id
"""
)
# How many of a run's reruns its detail lists (the first ones; the runs list's filters find
# the rest).
MAX_RERUNS_SHOWN = 100


def get_run(conn: Connection, project_id: str, run_id: uuid.UUID | str) -> dict[str, Any] | None:
    """One run as a plain dict, scoped by project (another project's run is not found), with
    its rerun links: ``rerun_of`` (the run it reran) and ``reruns`` (the first
    :data:`MAX_RERUNS_SHOWN` runs that reran it, oldest first: run id, status, created)."""
    params = {"run_id": run_id, "project_id": project_id, "max_reruns": MAX_RERUNS_SHOWN}
    row = conn.execute(_GET_RUN, params).mappings().first()
    if row is None:
        return None
    run = dict(row)
    for column in ("input", "output", "saga_steps", "reruns"):  # JSONB, decoded whatever its depth
        run[column] = jsonb.loads_for_display(run[column])
    return run


_ACTIVE_DEFINITIONS = text(
    f"""
SELECT workflow_name, workflow_version, workflow_digest, count(*) AS runs
FROM awooop_run_state
WHERE status IN ({sql_list(states.UNFINISHED_STATUSES)})
  AND (CAST(:project_id AS text) IS NULL OR project_id = :project_id)
GROUP BY workflow_name, workflow_version, workflow_digest
ORDER BY workflow_name, workflow_version, workflow_digest
"""
)


def active_definitions(
    conn: Connection, project_id: str | None = None
) -> list[tuple[str, int, str, int]]:
    """(name, version, digest, runs) of every workflow definition unfinished runs use — of
    one project's runs, or (``project_id`` None) of all."""
    rows = conn.execute(_ACTIVE_DEFINITIONS, {"project_id": project_id})
    return [(r.workflow_name, r.workflow_version, r.workflow_digest, r.runs) for r in rows]
