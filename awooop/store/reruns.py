"""Reruns: new runs that start again with a finished run's input.

A rerun is not an admission of the provider's event: it writes no dedupe row and leaves the
original's alone. Its identity is the rerun request's ``Idempotency-Key`` (``rerun_key``):
one rerun of a run per key in a project (``uq_awooop_run_state_rerun_key``), and the
request that made them is found again by that key. The statements compose into the
caller's transaction (:func:`lock` holds until it commits).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

from awooop import ids
from awooop.domain import states
from awooop.store import admission
from awooop.store.literals import sql_list

_TERMINAL = sql_list(states.TERMINAL_STATUSES)
_ACTIVE = sql_list(states.UNFINISHED_STATUSES)
# The first key of the rerun-request advisory lock (the second is the hash of project and key).
RERUN_LOCK_NAMESPACE = 0x415753  # "AWS"

_LOCK = text("SELECT pg_advisory_xact_lock(:namespace, hashtext(:project_id || '/' || :key))")


def lock(conn: Connection, project_id: str, key: str) -> None:
    """Take the lock of the rerun request ``key`` in the project until the transaction ends:
    two copies of one request are decided one after the other."""
    conn.execute(_LOCK, {"namespace": RERUN_LOCK_NAMESPACE, "project_id": project_id, "key": key})


@dataclass(frozen=True)
class Rerun:
    """A run a rerun request made: its id, the run it reran, its status now, and when it
    became (or becomes) claimable."""

    run_id: uuid.UUID
    rerun_of: uuid.UUID
    status: str
    available_at: datetime
    # The digest of the request that made it (a retry must carry the same request).
    request_digest: str | None = None


# The runs a request key made, with the digest recorded in each one's first history row.
_BY_KEY = text(
    """
SELECT r.run_id, r.rerun_of, r.status, r.available_at,
       e.detail ->> 'request_digest' AS request_digest
FROM awooop_run_state r
LEFT JOIN LATERAL (
    SELECT ev.detail FROM awooop_run_event ev
    WHERE ev.run_id = r.run_id
    ORDER BY ev.seq
    LIMIT 1
) e ON TRUE
WHERE r.project_id = :project_id AND r.rerun_key = :key
ORDER BY r.available_at, r.run_id
"""
)


def by_key(conn: Connection, project_id: str, key: str) -> list[Rerun]:
    """The runs the rerun request ``key`` made in the project, in the order they become
    claimable (none: no such request)."""
    rows = conn.execute(_BY_KEY, {"project_id": project_id, "key": key})
    return [Rerun(r.run_id, r.rerun_of, r.status, r.available_at, r.request_digest) for r in rows]


@dataclass(frozen=True)
class Original:
    run_id: uuid.UUID
    status: str
    workflow_name: str
    workflow_version: int


_ORIGINAL = text(
    """
SELECT run_id, status, workflow_name, workflow_version
FROM awooop_run_state
WHERE run_id = :run_id AND project_id = :project_id
"""
)


def original(conn: Connection, project_id: str, run_id: uuid.UUID) -> Original | None:
    """The run to rerun, or None when the project has no such run."""
    row = conn.execute(_ORIGINAL, {"run_id": run_id, "project_id": project_id}).first()
    if row is None:
        return None
    return Original(row.run_id, row.status, row.workflow_name, row.workflow_version)


# The active-run quota, counted as admission counts it: behind admission's advisory lock on
# the project (so a concurrent admission or rerun counts these runs), and at most the quota.
_LOCK_ADMISSIONS = text("SELECT pg_advisory_xact_lock(:namespace, hashtext(:project_id))")
_ACTIVE_RUNS = text(
    f"""
SELECT count(*) FROM (
    SELECT 1 FROM awooop_run_state
    WHERE project_id = :project_id AND status IN ({_ACTIVE})
    LIMIT :up_to) active
"""
)


def active_runs(conn: Connection, project_id: str, up_to: int) -> int:
    """The project's active runs (counted up to ``up_to``), after taking admission's lock
    on the project until the transaction ends."""
    params = {"namespace": admission.ADMISSION_LOCK_NAMESPACE, "project_id": project_id}
    conn.execute(_LOCK_ADMISSIONS, params)
    return int(conn.execute(_ACTIVE_RUNS, {"project_id": project_id, "up_to": up_to}).scalar_one())


@dataclass(frozen=True)
class NewRerun:
    """One run to start again: the original, the definition the new run uses (the version
    the original ran, as registered now), and how long after now it becomes claimable."""

    rerun_of: uuid.UUID
    workflow_digest: str
    max_attempts: int
    deadline_seconds: float | None
    delay_seconds: float


# One statement: the new runs (the originals' channel, workflow, version and input; only of
# originals that are finished), each claimable from now + its delay; a run deadline from
# then; a 'start' timer that nudges a delayed run when it becomes claimable (a timer with no
# effect but the nudge); a history row on each new run (its first: the request's digest is
# kept there) and one on each original.
_INSERT = text(
    f"""
WITH item AS (
    SELECT * FROM jsonb_to_recordset(CAST(:items AS jsonb))
        AS i(run_id uuid, rerun_of uuid, workflow_digest text, max_attempts int,
             deadline double precision, delay double precision)
), original AS (
    SELECT o.run_id, o.project_id, o.channel_type, o.workflow_name, o.workflow_version,
           o.input, o.correlation_key, o.status
    FROM awooop_run_state o
    WHERE o.run_id IN (SELECT rerun_of FROM item) AND o.project_id = :project_id
      AND o.status IN ({_TERMINAL})
), run AS (
    INSERT INTO awooop_run_state
        (run_id, project_id, channel_type, workflow_name, workflow_version, workflow_digest,
         input, max_attempts, correlation_key, rerun_of, rerun_key, available_at, enqueued_at)
    SELECT i.run_id, o.project_id, o.channel_type, o.workflow_name, o.workflow_version,
           i.workflow_digest, o.input, i.max_attempts, o.correlation_key, o.run_id, :key,
           now() + make_interval(secs => i.delay), now() + make_interval(secs => i.delay)
    FROM item i JOIN original o ON o.run_id = i.rerun_of
    ON CONFLICT (project_id, rerun_key, rerun_of) WHERE rerun_key IS NOT NULL DO NOTHING
    RETURNING run_id, rerun_of, status, available_at
), deadline AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version)
    SELECT r.run_id::text || '\\:deadline', r.run_id, 'deadline',
           r.available_at + make_interval(secs => i.deadline), -1
    FROM run r JOIN item i ON i.run_id = r.run_id
    WHERE i.deadline IS NOT NULL
), start AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version)
    SELECT r.run_id::text || '\\:start', r.run_id, 'start', r.available_at, 0
    FROM run r JOIN item i ON i.run_id = r.run_id
    WHERE i.delay > 0
), history AS (
    INSERT INTO awooop_run_event (run_id, kind, to_status, trigger, actor, detail)
    SELECT r.run_id, 'transition', r.status, 'operator', :actor,
           jsonb_build_object('operation', 'rerun', 'rerun_of', r.rerun_of,
                              'idempotency_key', CAST(:key AS text),
                              'request_digest', CAST(:request_digest AS text),
                              'reason', CAST(:reason AS text),
                              'available_at', r.available_at)
    FROM run r
), reran AS (
    INSERT INTO awooop_run_event (run_id, kind, from_status, to_status, trigger, actor, detail)
    SELECT o.run_id, 'management', o.status, o.status, 'operator', :actor,
           jsonb_build_object('operation', 'rerun', 'rerun_run_id', r.run_id,
                              'idempotency_key', CAST(:key AS text),
                              'reason', CAST(:reason AS text))
    FROM run r JOIN original o ON o.run_id = r.rerun_of
)
SELECT run_id, rerun_of, status, available_at FROM run ORDER BY available_at, run_id
"""
)


def insert(
    conn: Connection,
    project_id: str,
    key: str,
    request_digest: str,
    actor: str,
    reason: str,
    items: list[NewRerun],
) -> list[Rerun]:
    """Start each of ``items`` again as a new PENDING run, linked to its original and
    recorded under ``key``; an original that is not finished (or not in the project) is
    skipped. The new runs, in the order they become claimable."""
    if not items:
        return []
    rows: list[dict[str, Any]] = [
        {
            "run_id": str(ids.uuid4()),
            "rerun_of": str(item.rerun_of),
            "workflow_digest": item.workflow_digest,
            "max_attempts": item.max_attempts,
            "deadline": item.deadline_seconds,
            "delay": item.delay_seconds,
        }
        for item in items
    ]
    found = conn.execute(
        _INSERT,
        {
            "items": json.dumps(rows),
            "project_id": project_id,
            "key": key,
            "request_digest": request_digest,
            "actor": actor,
            "reason": reason,
        },
    )
    return [Rerun(r.run_id, r.rerun_of, r.status, r.available_at, request_digest) for r in found]
