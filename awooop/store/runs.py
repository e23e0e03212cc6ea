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
       created_at, updated_at, finished_at
FROM awooop_run_state
WHERE run_id = :run_id AND project_id = :project_id
"""
)


def get_run(conn: Connection, project_id: str, run_id: uuid.UUID | str) -> dict[str, Any] | None:
    """One run as a plain dict, scoped by project (another project's run is not found)."""
    row = conn.execute(_GET_RUN, {"run_id": run_id, "project_id": project_id}).mappings().first()
    if row is None:
        return None
    run = dict(row)
    for column in ("input", "output", "saga_steps"):  # JSONB, decoded whatever its depth
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
