"""Admitting a channel event: the dedupe row and the run row in one statement."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, text

from awooop import ids
from awooop.domain import states
from awooop.domain.workflow import Correlation, Workflow
from awooop.store import signals
from awooop.store.literals import sql_list
from awooop.store.prepared import PreparedStatement

# One round trip: insert the dedupe row; only if it was inserted, insert the run and its
# first history row; otherwise return the run the earlier event created. {quota} is empty
# or the active-run quota's condition (below).
_ADMIT_TEMPLATE = """
WITH seen AS (
    SELECT d.run_id, d.request_digest
    FROM awooop_channel_event_dedupe d
    WHERE d.project_id = :project_id
      AND d.channel_type = :channel_type
      AND d.provider_event_id = :provider_event_id
), dedupe AS (
    -- A key already seen inserts nothing and writes nothing (a read-only statement);
    -- ON CONFLICT settles a race with a concurrent first copy of the same event.
    INSERT INTO awooop_channel_event_dedupe
        (dedupe_id, project_id, channel_type, provider_event_id, run_id, request_digest)
    SELECT :dedupe_id, :project_id, :channel_type, :provider_event_id, :run_id,
           :request_digest
    WHERE NOT EXISTS (SELECT 1 FROM seen){quota}
    ON CONFLICT (project_id, channel_type, provider_event_id) DO NOTHING
    RETURNING run_id
), run AS (
    INSERT INTO awooop_run_state
        (run_id, project_id, channel_type, workflow_name, workflow_version, workflow_digest,
         input, max_attempts, traceparent, correlation_key)
    SELECT run_id, :project_id, :channel_type, :workflow_name, :workflow_version,
           :workflow_digest, CAST(:input AS jsonb), :max_attempts, :traceparent,
           CAST(:correlation_key AS text)
    FROM dedupe
    RETURNING run_id, status
), deadline AS (
    -- Only for workflows with a run deadline; it fires whatever the run's version then.
    INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version)
    SELECT run_id::text || ':deadline', run_id, 'deadline',
           now() + make_interval(secs => CAST(:deadline AS double precision)), -1
    FROM run
    WHERE CAST(:deadline AS double precision) IS NOT NULL
), history AS (
    INSERT INTO awooop_run_event (run_id, kind, to_status, trigger, detail)
    SELECT run_id, 'transition', status, 'event',
           jsonb_build_object('channel_type', CAST(:channel_type AS text),
                              'provider_event_id', CAST(:provider_event_id AS text))
    FROM run
)
SELECT run_id, status, TRUE AS created, CAST(:request_digest AS text) AS request_digest
FROM run
UNION ALL
SELECT s.run_id, r.status, FALSE, s.request_digest
FROM seen s
JOIN awooop_run_state r ON r.run_id = s.run_id
"""

_ADMIT = PreparedStatement("awooop_admit", _ADMIT_TEMPLATE.format(quota=""))

# The active-run quota. The count stops at the quota, so it reads at most
# max_active_runs index entries of ix_awooop_run_state_project_status.
_ACTIVE = sql_list(states.UNFINISHED_STATUSES)
_WITHIN_QUOTA = f"""
      AND (SELECT count(*) FROM (
               SELECT 1 FROM awooop_run_state a
               WHERE a.project_id = :project_id AND a.status IN ({_ACTIVE})
               LIMIT :max_active_runs) active) < :max_active_runs"""

# Race-free: concurrent admissions of one project would each count the runs committed
# before their own statement began and could all pass. So the statement runs behind a
# transaction-scoped advisory lock on the project, sent in the same round trip: PostgreSQL
# runs a multi-statement query as one implicit transaction, the lock is held until it
# commits, and (READ COMMITTED) the admission's snapshot is taken after the lock was
# granted, so it counts every run admitted before it. Other projects take other locks.
_ADMIT_WITHIN_QUOTA = PreparedStatement(
    "awooop_admit_within_quota",
    _ADMIT_TEMPLATE.format(quota=_WITHIN_QUOTA),
    lock="SELECT pg_advisory_xact_lock(:lock_namespace, hashtext(:project_id))",
)
# The first key of the project-admission advisory lock (the second is the project's hash).
ADMISSION_LOCK_NAMESPACE = 0x415751  # "AWQ"


class OverQuota(Exception):
    """The project has ``max_active_runs`` active runs; nothing was written."""


# When a concurrent admission of the same key committed after our statement's snapshot was
# taken, ON CONFLICT waited for it but the snapshot cannot see its row: look again.
_EXISTING = text(
    """
SELECT d.run_id, r.status, FALSE AS created, d.request_digest
FROM awooop_channel_event_dedupe d
JOIN awooop_run_state r ON r.run_id = d.run_id
WHERE d.project_id = :project_id
  AND d.channel_type = :channel_type
  AND d.provider_event_id = :provider_event_id
"""
)


@dataclass(frozen=True)
class Admission:
    run_id: uuid.UUID
    status: str
    created: bool
    # False when the key was seen before with another request body (E-IDEMPOTENT-002).
    digest_matches: bool
    # The event went to an open run as this signal (not created, not a duplicate either).
    signalled: str | None = None
    # ... and that run waited for it: send its message.
    woke: bool = False


@dataclass(frozen=True)
class NewRun:
    project_id: str
    channel_type: str
    provider_event_id: str
    request_digest: str
    workflow_name: str
    workflow_version: int
    workflow_digest: str
    max_attempts: int
    input: dict[str, Any]
    traceparent: str | None = None
    deadline_seconds: float | None = None
    # The workflow's correlation key for this event (a run started by it carries the key).
    correlation_key: str | None = None

    @classmethod
    def of(
        cls,
        workflow: Workflow,
        project_id: str,
        input: dict[str, Any],
        request_digest: str,
        traceparent: str | None = None,
    ) -> NewRun:
        """A run of ``workflow`` on ``input`` (``{"channel", "provider_event_id", "event",
        "meta", "project"}``): its channel and event id are the input's."""
        return cls(
            project_id=project_id,
            channel_type=str(input["channel"]),
            provider_event_id=str(input["provider_event_id"]),
            request_digest=request_digest,
            workflow_name=workflow.name,
            workflow_version=workflow.version,
            workflow_digest=workflow.digest,
            max_attempts=workflow.max_attempts,
            input=input,
            traceparent=traceparent,
            deadline_seconds=workflow.deadline_seconds,
        )


def admit(
    conn: Connection,
    new: NewRun,
    max_active_runs: int | None = None,
    correlation: Correlation | None = None,
) -> Admission:
    """Insert the event's dedupe row and its run, or find the run an earlier copy created.

    With ``max_active_runs``, a new event of a project that has that many active runs raises
    :class:`OverQuota` and writes nothing; a duplicate is still answered. Runs in the
    caller's transaction; the caller commits and then sends the Celery message.

    With ``correlation`` (the caller's transaction must be a real one: several statements),
    an event whose key belongs to an open run of the workflow goes to that run as the
    correlation's signal instead (:func:`_signal_open_run`).
    """
    if correlation is not None:
        return _signal_open_run(conn, new, correlation, max_active_runs)
    params = {
        "project_id": new.project_id,
        "channel_type": new.channel_type,
        "provider_event_id": new.provider_event_id,
        "request_digest": new.request_digest,
        "run_id": ids.uuid4(),
        # Time-ordered: new rows go to the right edge of the dedupe table's primary key.
        "dedupe_id": ids.uuid7(),
        "workflow_name": new.workflow_name,
        "workflow_version": new.workflow_version,
        "workflow_digest": new.workflow_digest,
        "input": json.dumps(new.input),
        "max_attempts": new.max_attempts,
        "traceparent": new.traceparent,
        "deadline": new.deadline_seconds,
        "correlation_key": new.correlation_key,
    }
    if max_active_runs is None:
        row = _ADMIT.execute(conn, params).first()
    else:
        params["max_active_runs"] = max_active_runs
        params["lock_namespace"] = ADMISSION_LOCK_NAMESPACE
        row = _ADMIT_WITHIN_QUOTA.execute(conn, params).first()
    if row is None and max_active_runs is None:
        row = conn.execute(_EXISTING, params).one()
    elif row is None:
        # The quota refused a new event (or, rarely, a concurrent copy of it won).
        row = conn.execute(_EXISTING, params).first()
        if row is None:
            raise OverQuota(new.project_id)
    return Admission(
        run_id=row.run_id,
        status=row.status,
        created=row.created,
        digest_matches=row.request_digest == new.request_digest,
    )


# Correlated events of one (project, workflow, key) are admitted one at a time: the lock is
# held until the admission's transaction commits, so two first events never both start a
# run, and a later one sees the run the earlier one started.
_LOCK_CORRELATION = text(
    "SELECT pg_advisory_xact_lock(:namespace,"
    " hashtext(:project_id || '/' || :workflow_name || '/' || :correlation_key))"
)
CORRELATION_LOCK_NAMESPACE = 0x415752  # "AWR"

_OPEN_RUN = text(
    f"""
SELECT run_id FROM awooop_run_state
WHERE project_id = :project_id AND workflow_name = :workflow_name
  AND correlation_key = :correlation_key AND status IN ({_ACTIVE})
ORDER BY created_at
LIMIT 1
"""
)

_RECORD_SIGNALLED = text(
    """
INSERT INTO awooop_channel_event_dedupe
    (dedupe_id, project_id, channel_type, provider_event_id, run_id, request_digest)
VALUES (:dedupe_id, :project_id, :channel_type, :provider_event_id, :run_id, :request_digest)
ON CONFLICT (project_id, channel_type, provider_event_id) DO NOTHING
"""
)


def _signal_open_run(
    conn: Connection, new: NewRun, correlation: Correlation, max_active_runs: int | None
) -> Admission:
    """A correlated event: a duplicate is answered as ever; else, if an open run of the
    workflow has the key, the event is kept for it as the signal (its id the event's, its
    payload the run input it would have started) and its dedupe row points at that run — in
    one transaction, so a retry of the event is a duplicate and never a second signal. With
    no open run (or one that finished meanwhile), the event starts a run carrying the key."""
    params = {
        "namespace": CORRELATION_LOCK_NAMESPACE,
        "project_id": new.project_id,
        "channel_type": new.channel_type,
        "provider_event_id": new.provider_event_id,
        "workflow_name": new.workflow_name,
        "correlation_key": correlation.key,
        "request_digest": new.request_digest,
    }
    conn.execute(_LOCK_CORRELATION, params)
    seen = conn.execute(_EXISTING, params).first()
    open_run = None if seen is not None else conn.execute(_OPEN_RUN, params).scalar()
    if open_run is not None:
        signal_id = f"event:{new.channel_type}:{new.provider_event_id}"
        delivery = signals.deliver(
            conn,
            new.project_id,
            open_run,
            correlation.signal,
            signal_id,
            new.input,
            new.request_digest,
        )
        if delivery.outcome in ("delivered", "kept", "duplicate"):
            conn.execute(
                _RECORD_SIGNALLED, {**params, "run_id": open_run, "dedupe_id": ids.uuid7()}
            )
            return Admission(
                run_id=open_run,
                status=delivery.run_status or states.PENDING,
                created=False,
                digest_matches=True,
                signalled=correlation.signal,
                woke=delivery.outcome == "delivered",
            )
    return admit(conn, replace(new, correlation_key=correlation.key), max_active_runs)
