"""Read-only statements for the runs API: run lists, the audit trail, the intervention queue.

Every statement is scoped by ``project_id``: another project's run is never found. Pages are
keyset pages: a list continues strictly after the last row of the previous page, so rows
created meanwhile cause neither duplicates nor gaps. Optional filters are written as
``(:x IS NULL OR …)``; psycopg2 sends the values inline, so the planner folds away the
filters not given.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

# What a list shows of a run (the detail adds input, output and the step journal).
_SUMMARY_COLUMNS = """
run_id, channel_type, workflow_name, workflow_version, status, saga_status, direction,
control_state, current_step, attempt_count, max_attempts, failure_code, failure_reason,
version, created_at, updated_at, finished_at, rerun_of, tags
"""


# The outbox statuses a run list can be filtered by (the backlog: unsent messages), and the
# longest failure code (awooop_run_state.failure_code).
OUTBOX_FILTER_STATUSES = ("PENDING", "PARKED")
MAX_FAILURE_CODE = 64


@dataclass(frozen=True)
class RunFilters:
    statuses: tuple[str, ...] = ()
    saga_statuses: tuple[str, ...] = ()
    workflow: str | None = None
    channel: str | None = None
    created_from: datetime | None = None  # inclusive
    created_until: datetime | None = None  # exclusive
    finished_from: datetime | None = None  # inclusive
    finished_until: datetime | None = None  # exclusive
    failure_code: str | None = None
    # Only runs with an outbox message in this status (PENDING or PARKED: the backlog).
    outbox: str | None = None
    # The runs an event started (any channel), and their reruns (they carry its input).
    provider_event_id: str | None = None
    # The runs started with this Idempotency-Key: an API start request's (its event id),
    # or a rerun request's.
    idempotency_key: str | None = None
    # Runs with every one of these tags ({key: value}, AND).
    tags: dict[str, str] | None = None


@dataclass(frozen=True)
class RunPosition:
    """Where a page of runs ends: the keyset (created_at, run_id)."""

    created_at: datetime
    run_id: uuid.UUID


# Newest first. Served by ix_awooop_run_state_project_status when a status is given, by
# ix_awooop_run_state_project_finished for a finish-time range; by
# ix_awooop_run_state_provider_event for an event id (and with uq_awooop_run_state_rerun_key,
# as a bitmap OR, for an idempotency key), by ix_awooop_run_state_tags for tags.
_LIST_RUNS_WHERE = """
WHERE project_id = :project_id
  AND (CAST(:statuses AS text[]) IS NULL OR status = ANY(CAST(:statuses AS text[])))
  AND (CAST(:saga_statuses AS text[]) IS NULL
       OR saga_status = ANY(CAST(:saga_statuses AS text[])))
  AND (CAST(:workflow AS text) IS NULL OR workflow_name = :workflow)
  AND (CAST(:channel AS text) IS NULL OR channel_type = :channel)
  AND (CAST(:created_from AS timestamptz) IS NULL OR created_at >= :created_from)
  AND (CAST(:created_until AS timestamptz) IS NULL OR created_at < :created_until)
  AND (CAST(:finished_from AS timestamptz) IS NULL OR finished_at >= :finished_from)
  AND (CAST(:finished_until AS timestamptz) IS NULL OR finished_at < :finished_until)
  AND (CAST(:failure_code AS text) IS NULL OR failure_code = :failure_code)
  AND (CAST(:provider_event_id AS text) IS NULL
       OR (input ->> 'provider_event_id') = :provider_event_id)
  AND (CAST(:idempotency_key AS text) IS NULL
       OR rerun_key = :idempotency_key
       OR (rerun_of IS NULL AND channel_type = 'api'
           AND (input ->> 'provider_event_id') = :idempotency_key))
  AND (CAST(:tags AS jsonb) IS NULL OR tags @> CAST(:tags AS jsonb))
  AND (CAST(:after_created_at AS timestamptz) IS NULL
       OR (created_at, run_id) < (CAST(:after_created_at AS timestamptz),
                                  CAST(:after_run_id AS uuid)))
"""
_LIST_RUNS = text(
    f"""
SELECT {_SUMMARY_COLUMNS}
FROM awooop_run_state
{_LIST_RUNS_WHERE}
ORDER BY created_at DESC, run_id DESC
LIMIT :limit
"""
)
# The runs with an unsent message (the outbox backlog): a plain AND of the IN, which the
# planner turns into a join starting from ix_awooop_outbox_project_unsent — under an
# ``(:outbox IS NULL OR …)`` it would stay a filter over every run of the project.
_LIST_RUNS_WITH_OUTBOX = text(
    f"""
SELECT {_SUMMARY_COLUMNS}
FROM awooop_run_state
{_LIST_RUNS_WHERE}
  AND run_id IN (
        SELECT o.run_id FROM awooop_outbox o
        WHERE o.project_id = :project_id AND o.status = :outbox
          AND o.status IN ('PENDING', 'PARKED'))
ORDER BY created_at DESC, run_id DESC
LIMIT :limit
"""
)


def list_runs(
    conn: Connection,
    project_id: str,
    filters: RunFilters,
    after: RunPosition | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` of the project's runs, newest first, after ``after``."""
    rows = conn.execute(
        _LIST_RUNS if filters.outbox is None else _LIST_RUNS_WITH_OUTBOX,
        {
            "project_id": project_id,
            "statuses": list(filters.statuses) or None,
            "saga_statuses": list(filters.saga_statuses) or None,
            "workflow": filters.workflow,
            "channel": filters.channel,
            "created_from": filters.created_from,
            "created_until": filters.created_until,
            "finished_from": filters.finished_from,
            "finished_until": filters.finished_until,
            "failure_code": filters.failure_code,
            "outbox": filters.outbox,
            "provider_event_id": filters.provider_event_id,
            "idempotency_key": filters.idempotency_key,
            "tags": json.dumps(filters.tags) if filters.tags else None,
            "after_created_at": after.created_at if after else None,
            "after_run_id": after.run_id if after else None,
            "limit": limit,
        },
    ).mappings()
    return [dict(r) for r in rows]


# Oldest first: the run that has waited longest for a person is at the top.
_INTERVENTIONS = text(
    f"""
SELECT {_SUMMARY_COLUMNS}
FROM awooop_run_state
WHERE project_id = :project_id
  AND saga_status = 'MANUAL_INTERVENTION'
  AND (CAST(:after_created_at AS timestamptz) IS NULL
       OR (created_at, run_id) > (CAST(:after_created_at AS timestamptz),
                                  CAST(:after_run_id AS uuid)))
ORDER BY created_at, run_id
LIMIT :limit
"""
)


def intervention_queue(
    conn: Connection, project_id: str, after: RunPosition | None, limit: int
) -> list[dict[str, Any]]:
    """The project's runs waiting for a person (saga MANUAL_INTERVENTION), oldest first."""
    rows = conn.execute(
        _INTERVENTIONS,
        {
            "project_id": project_id,
            "after_created_at": after.created_at if after else None,
            "after_run_id": after.run_id if after else None,
            "limit": limit,
        },
    ).mappings()
    return [dict(r) for r in rows]


# The run's project is checked in the same statement: no row at all means no such run in
# this project; a run with no (more) events gives one row of NULLs.
_RUN_EVENTS = text(
    """
SELECT e.seq, e.kind, e.from_status, e.to_status, e.trigger, e.trigger_id, e.actor, e.detail,
       e.at
FROM awooop_run_state r
LEFT JOIN LATERAL (
    SELECT * FROM awooop_run_event ev
    WHERE ev.run_id = r.run_id AND ev.seq > :after_seq
    ORDER BY ev.seq
    LIMIT :limit
) e ON TRUE
WHERE r.run_id = :run_id AND r.project_id = :project_id
ORDER BY e.seq
"""
)


def run_events(
    conn: Connection, project_id: str, run_id: uuid.UUID, after_seq: int, limit: int
) -> list[dict[str, Any]] | None:
    """Up to ``limit`` audit rows of the run with ``seq > after_seq``, in order; None when
    the project has no such run."""
    rows = conn.execute(
        _RUN_EVENTS,
        {"project_id": project_id, "run_id": run_id, "after_seq": after_seq, "limit": limit},
    ).mappings()
    found = [dict(r) for r in rows]
    if not found:
        return None
    return [r for r in found if r["seq"] is not None]
