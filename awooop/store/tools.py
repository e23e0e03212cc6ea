"""Asynchronous tool results: accepted once (``awooop_inbox``); conflicting ones escalated."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store import interventions
from awooop.store.literals import sql_list, status_of_named_row

INBOX_CONSUMER = "tool-results"

states.check_transition(states.WAITING_TOOL, states.PENDING)

# The latest dispatch of :step, read from the journal.
_LAST_DISPATCH = """(
    SELECT e FROM jsonb_array_elements(t.saga_steps) e
    WHERE e ->> 'step' = :step AND e ->> 'status' = 'DISPATCHED'
    ORDER BY (e ->> 'attempt')::int DESC LIMIT 1
)"""

# One statement: remember the event id (a repeat is a duplicate); if the run is waiting on
# this step, append the result to the journal and make the run claimable again. A late
# success — the run is waiting to retry this step after a timeout or failure — is taken as
# the upcoming attempt's result when the step's policy accepts late successes. Anything else
# is late: kept in the history only.
_DELIVER = text(
    f"""
WITH target AS (
    SELECT run_id, status, saga_status, control_state, current_step, version, saga_steps,
           {_LAST_DISPATCH} AS dispatch
    FROM awooop_run_state t
    WHERE run_id = :run_id AND project_id = :project_id
    FOR UPDATE
), inbox AS (
    INSERT INTO awooop_inbox (consumer, event_id, run_id, request_digest)
    SELECT :consumer, :event_id, run_id, :digest FROM target
    ON CONFLICT (consumer, event_id) DO NOTHING
    RETURNING event_id
), seen AS (
    SELECT request_digest FROM awooop_inbox WHERE consumer = :consumer AND event_id = :event_id
), fit AS (
    SELECT run_id,
           CASE WHEN status = 'WAITING_TOOL' THEN (dispatch ->> 'attempt')::int
                ELSE (dispatch ->> 'attempt')::int + 1 END AS attempt
    FROM target
    WHERE EXISTS (SELECT 1 FROM inbox) AND current_step = :step AND dispatch IS NOT NULL
      AND (status = 'WAITING_TOOL'
           OR (CAST(:status AS text) = 'SUCCEEDED' AND status = 'PENDING'
               AND saga_status = 'RUNNING' AND control_state = 'ACTIVE'
               AND dispatch ->> 'late_result' IN ('accept', 'compensate')
               AND NOT EXISTS (
                   SELECT 1 FROM jsonb_array_elements(saga_steps) e
                   WHERE e ->> 'phase' = 'tool_result' AND e ->> 'step' = :step
                     AND (e ->> 'attempt')::int > (dispatch ->> 'attempt')::int)))
), accepted AS (
    UPDATE awooop_run_state r
    SET saga_steps = r.saga_steps || jsonb_build_array(
            CAST(:entry AS jsonb) || jsonb_build_object(
                'attempt', f.attempt, 'late', r.status = 'PENDING', 'recorded_at', now())),
        status = 'PENDING',
        available_at = now(),
        enqueued_at = now(),
        version = r.version + 1,
        updated_at = now()
    FROM fit f
    WHERE r.run_id = f.run_id
    RETURNING r.run_id
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, detail)
    SELECT t.run_id,
           CASE WHEN EXISTS (SELECT 1 FROM accepted) THEN 'transition' ELSE 'late_result' END,
           t.status,
           CASE WHEN EXISTS (SELECT 1 FROM accepted) THEN 'PENDING' ELSE t.status END,
           'tool', :event_id, CAST(:detail AS jsonb)
    FROM target t
    WHERE EXISTS (SELECT 1 FROM inbox)
)
SELECT t.status,
       EXISTS (SELECT 1 FROM inbox) AS first_delivery,
       EXISTS (SELECT 1 FROM accepted) AS accepted,
       (SELECT request_digest FROM seen) AS known_digest
FROM target t
"""
)


@dataclass(frozen=True)
class Delivery:
    """``accepted``: the run resumes with it. ``duplicate``: this event id was seen before
    (``digest_matches`` False: with another payload). Neither: late, kept in the history."""

    accepted: bool
    duplicate: bool
    digest_matches: bool
    run_status: str


class RunNotFound(LookupError):
    pass


def deliver(
    conn: Connection,
    project_id: str,
    run_id: uuid.UUID | str,
    event_id: str,
    step: str,
    result: dict[str, Any],
    digest: str,
) -> Delivery:
    entry = {"phase": "tool_result", "step": step, "event_id": event_id, **result}
    detail = {"step": step, "status": result["status"]}
    row = conn.execute(
        _DELIVER,
        {
            "run_id": run_id,
            "project_id": project_id,
            "consumer": INBOX_CONSUMER,
            "event_id": event_id,
            "digest": digest,
            "step": step,
            "status": result["status"],
            "entry": json.dumps(entry),
            "detail": json.dumps(detail),
        },
    ).first()
    if row is None:
        raise RunNotFound(str(run_id))
    return Delivery(
        accepted=row.accepted,
        duplicate=not row.first_delivery,
        digest_matches=row.known_digest in (None, digest),
        run_status=row.status,
    )


_WORKFLOW_OF = text(
    "SELECT workflow_name, workflow_version FROM awooop_run_state"
    " WHERE run_id = :run_id AND project_id = :project_id"
)


def workflow_of(conn: Connection, project_id: str, run_id: uuid.UUID | str) -> tuple[str, int]:
    """The (name, version) of the project's run's workflow; RunNotFound without one."""
    row = conn.execute(_WORKFLOW_OF, {"run_id": run_id, "project_id": project_id}).first()
    if row is None:
        raise RunNotFound(str(run_id))
    return row.workflow_name, row.workflow_version


_RUN_FACTS = text(
    "SELECT workflow_name, workflow_version, input, saga_steps, version"
    " FROM awooop_run_state WHERE run_id = :run_id"
)


# Where a conflict may hand the run to a person from, by the state machine's tables.
_ESCALATE_FROM_SAGA = [
    saga
    for saga, targets in states.ALLOWED_SAGA_TRANSITIONS.items()
    if "MANUAL_INTERVENTION" in targets or saga == "MANUAL_INTERVENTION"
]

# Two different outcomes for one attempt: record the conflict and hand the run to a person
# (compare-and-set on the version read with the journal), only from the states the tables
# allow. A run a worker holds loses its lease (the epoch moves on), so the worker's next
# write is refused. A finished run keeps its end.
_CONFLICT = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state r
    SET status = 'WAITING_APPROVAL',
        saga_status = 'MANUAL_INTERVENTION',
        lease_until = NULL,
        worker_id = NULL,
        lease_epoch = CASE WHEN r.status = 'RUNNING' THEN r.lease_epoch + 1
                           ELSE r.lease_epoch END,
        attempt_count = 0,
        failure_code = 'E-SAGA-004',
        failure_reason = :reason,
        version = r.version + 1,
        updated_at = now()
    WHERE r.run_id = :run_id AND r.version = :version
      AND {status_of_named_row(states.ESCALATABLE_STATUSES, "r.status")}
      AND r.saga_status IN ({sql_list(_ESCALATE_FROM_SAGA)})
    RETURNING r.run_id, r.project_id, r.status, r.current_step, r.failure_reason
), superseded AS ({interventions.SUPERSEDE_PENDING}
), intervention AS ({interventions.OPEN_FROM_CHANGED}
)
INSERT INTO awooop_run_event (run_id, kind, to_status, trigger, trigger_id, detail)
SELECT :run_id, 'conflict', (SELECT status FROM changed), 'tool', :event_id || '-conflict',
       CAST(:detail AS jsonb)
RETURNING to_status
"""
)


@dataclass(frozen=True)
class RunFacts:
    workflow_name: str
    workflow_version: int
    input: dict[str, Any]
    journal: list[dict[str, Any]]
    version: int


def run_facts(conn: Connection, run_id: uuid.UUID | str) -> RunFacts:
    row = conn.execute(_RUN_FACTS, {"run_id": run_id}).one()
    return RunFacts(row.workflow_name, row.workflow_version, row.input, row.saga_steps, row.version)


def record_conflict(
    conn: Connection,
    run_id: uuid.UUID | str,
    version: int,
    event_id: str,
    reason: str,
    detail: dict[str, Any],
) -> bool:
    """Record a conflicting outcome; True when the run was escalated by it."""
    row = conn.execute(
        _CONFLICT,
        {
            "run_id": run_id,
            "version": version,
            "event_id": event_id,
            "reason": reason,
            "detail": json.dumps(detail),
            "via": "tool",
        },
    ).one()
    return bool(row.to_status == "WAITING_APPROVAL")
