"""Statements on ``awooop_run_state`` (and the history rows they write with it).

Lease protocol (ADR-114 D2/D3, DESIGN §4): a claim bumps ``lease_epoch``, the fencing token;
every write a lease holder makes carries ``worker_id = :worker_id AND lease_epoch = :epoch
AND status = 'RUNNING'``. Zero rows means the lease is gone: the caller stops without writing.
All times are the database's ``now()``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.outbound.messages import Message
from awooop.store.outbox import INSERT_FROM_CHANGED, messages_param
from awooop.store.prepared import PreparedStatement

# Each transition below is checked against the one table in awooop.domain.states at import.
for _from, _to in [
    (states.PENDING, states.RUNNING),
    (states.RESUMED, states.RUNNING),
    (states.RUNNING, states.COMPLETED),
    (states.RUNNING, states.FAILED),
    (states.RUNNING, states.PENDING),
]:
    states.check_transition(_from, _to)

_CLAIM_TEMPLATE = """
WITH candidate AS (
    SELECT run_id, status
    FROM awooop_run_state
    WHERE status IN ('PENDING', 'RESUMED')
      AND (lease_until IS NULL OR lease_until < now())
      AND available_at <= now()
      AND control_state = 'ACTIVE'
      {filter}
    ORDER BY available_at, created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE awooop_run_state r
    SET status = 'RUNNING',
        lease_until = now() + make_interval(secs => :lease_ttl),
        heartbeat_at = now(),
        attempt_count = r.attempt_count + 1,
        lease_epoch = r.lease_epoch + 1,
        worker_id = :worker_id,
        version = r.version + 1,
        updated_at = now()
    FROM candidate c
    WHERE r.run_id = c.run_id
    RETURNING r.run_id, r.project_id, r.workflow_name, r.workflow_version, r.workflow_digest,
              r.input, r.saga_steps, r.attempt_count, r.max_attempts, r.lease_epoch,
              r.lease_until, r.saga_status, r.version, r.failure_code, r.traceparent,
              c.status AS from_status,
              -- claim latency: since the run's message was sent (or its retry fell due)
              GREATEST(0, extract(epoch FROM now() - r.enqueued_at))::float8 AS waited
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
    SELECT run_id, 'lease', from_status, 'RUNNING', 'worker', 'claim:' || lease_epoch,
           :worker_id, jsonb_build_object('attempt', attempt_count, 'lease_epoch', lease_epoch)
    FROM claimed
)
SELECT * FROM claimed
"""
_CLAIM_BY_ID = PreparedStatement(
    "awooop_claim_by_id", _CLAIM_TEMPLATE.format(filter="AND run_id = :run_id")
)
_CLAIM_OLDEST = PreparedStatement("awooop_claim_oldest", _CLAIM_TEMPLATE.format(filter=""))


@dataclass(frozen=True)
class Claim:
    """A held lease: who holds it (worker_id) and the fencing token (lease_epoch)."""

    run_id: uuid.UUID
    project_id: str
    workflow_name: str
    workflow_version: int
    workflow_digest: str
    input: dict[str, Any]
    saga_steps: list[dict[str, Any]]
    attempt_count: int
    max_attempts: int
    lease_epoch: int
    worker_id: str
    saga_status: str = "RUNNING"
    version: int = 0
    failure_code: str | None = None
    # The W3C trace context the run was admitted with (for log lines), if any.
    traceparent: str | None = None
    # Seconds between the run's message being sent (or its retry falling due) and this claim.
    waited_seconds: float = 0.0


def claim(
    conn: Connection, worker_id: str, lease_ttl: float, run_id: uuid.UUID | str | None = None
) -> Claim | None:
    """Take the lease on ``run_id`` (or the oldest claimable run); None if nothing is claimable."""
    params = {"worker_id": worker_id, "lease_ttl": lease_ttl}
    if run_id is None:
        row = _CLAIM_OLDEST.execute(conn, params).first()
    else:
        row = _CLAIM_BY_ID.execute(conn, {**params, "run_id": run_id}).first()
    if row is None:
        return None
    return Claim(
        run_id=row.run_id,
        project_id=row.project_id,
        workflow_name=row.workflow_name,
        workflow_version=row.workflow_version,
        workflow_digest=row.workflow_digest,
        input=row.input,
        saga_steps=row.saga_steps,
        attempt_count=row.attempt_count,
        max_attempts=row.max_attempts,
        lease_epoch=row.lease_epoch,
        worker_id=worker_id,
        saga_status=row.saga_status,
        version=row.version,
        failure_code=row.failure_code,
        traceparent=row.traceparent,
        waited_seconds=row.waited,
    )


_FENCE = (
    "run_id = :run_id AND worker_id = :worker_id AND lease_epoch = :lease_epoch"
    " AND status = 'RUNNING'"
)


def _fence_params(c: Claim) -> dict[str, Any]:
    return {"run_id": c.run_id, "worker_id": c.worker_id, "lease_epoch": c.lease_epoch}


_RENEW = PreparedStatement(
    "awooop_renew",
    f"""
UPDATE awooop_run_state
SET lease_until = now() + make_interval(secs => :lease_ttl),
    heartbeat_at = now()
WHERE {_FENCE}
""",
)


def renew(conn: Connection, c: Claim, lease_ttl: float) -> bool:
    """Heartbeat (ADR-114 D2). False: the lease was reaped or re-claimed — stop."""
    return _RENEW.execute(conn, {**_fence_params(c), "lease_ttl": lease_ttl}).rowcount == 1


# Journal entries get the database's clock as recorded_at, in the order given.
_JOURNAL_APPEND = (
    "saga_steps = saga_steps || (SELECT jsonb_agg(e || jsonb_build_object('recorded_at', now())"
    " ORDER BY n) FROM jsonb_array_elements(CAST(:entries AS jsonb)) WITH ORDINALITY AS x(e, n))"
)

# Entering a WAITING_* state (DESIGN §4): the lease is released and the crash budget
# (attempt_count) starts again — the work before the wait succeeded.
_RELEASE_TO_WAIT = (
    "lease_until = NULL, attempt_count = 0, version = version + 1, updated_at = now()"
)

# A step record is not a transition: the journal entry is its history (no run_event row).
_RECORD_STEP = PreparedStatement(
    "awooop_record_step",
    f"""
UPDATE awooop_run_state
SET {_JOURNAL_APPEND},
    current_step = :next_step,
    saga_status = CASE WHEN saga_status = 'WAITING_RESOLUTION' THEN 'RUNNING'
                       ELSE saga_status END,
    heartbeat_at = now(),
    updated_at = now()
WHERE {_FENCE}
RETURNING control_state, saga_status, failure_code
""",
)


@dataclass(frozen=True)
class Steering:
    """What operators asked of a run, read back by every step record (no extra query)."""

    paused: bool = False
    cancelling: bool = False
    # Why it is cancelling: E-SAGA-002 (an operator) or E-SAGA-003 (the run deadline).
    cause: str | None = None


def record_step(
    conn: Connection, c: Claim, entries: list[dict[str, Any]], next_step: str | None
) -> Steering | None:
    """Append step outcomes to the journal, fenced. None: lease lost."""
    params = {**_fence_params(c), "entries": json.dumps(entries), "next_step": next_step}
    row = _RECORD_STEP.execute(conn, params).first()
    if row is None:
        return None
    return Steering(
        paused=row.control_state == "PAUSED",
        cancelling=row.saga_status == "CANCELLING",
        cause=row.failure_code,
    )


# Every statement below changes the run's state: it bumps ``version`` and writes one
# awooop_run_event row (trigger "worker", one per kind and lease epoch).
_HISTORY = """
INSERT INTO awooop_run_event
    (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
SELECT run_id, :event_kind, 'RUNNING', status, 'worker', :trigger_id, :worker_id,
       CAST(:detail AS jsonb)
FROM changed
"""

_FINISH = PreparedStatement(
    "awooop_finish",
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {_JOURNAL_APPEND},
        status = :to_status,
        saga_status = :saga_status,
        output = CAST(:output AS jsonb),
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        current_step = NULL,
        lease_until = NULL,
        version = version + 1,
        finished_at = now(),
        updated_at = now()
    WHERE {_FENCE}
    RETURNING run_id, project_id, status
), outbox AS ({INSERT_FROM_CHANGED}
), history AS ({_HISTORY})
SELECT count(*) FROM changed
""",
)

_TURN_BACK = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {_JOURNAL_APPEND},
        saga_status = 'COMPENSATING',
        direction = 'BACKWARD',
        current_step = :next_step,
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        version = version + 1,
        updated_at = now()
    WHERE {_FENCE}
    RETURNING run_id, status
), history AS ({_HISTORY})
SELECT count(*) FROM changed
"""
)

# Back to PENDING until ``delay`` from now; the retry timer wakes it (the orphan sweep is the
# backstop: enqueued_at is set to the wake-up time). The segment ended cleanly, so the crash
# budget (attempt_count) starts again.
_RETRY_LATER = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {_JOURNAL_APPEND},
        status = 'PENDING',
        saga_status = COALESCE(:saga_status, saga_status),
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = 0,
        available_at = now() + make_interval(secs => :delay),
        enqueued_at = now() + make_interval(secs => :delay),
        version = version + 1,
        updated_at = now()
    WHERE {_FENCE}
    RETURNING run_id, status, available_at, version
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'retry', :step, :attempt, available_at, version FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({_HISTORY})
SELECT count(*) FROM changed
"""
)

# A tool call went out: release the worker until the result, or the timeout timer.
_WAIT_TOOL = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {_JOURNAL_APPEND},
        status = 'WAITING_TOOL',
        current_step = :step,
        {_RELEASE_TO_WAIT}
    WHERE {_FENCE}
    RETURNING run_id, status, version
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'tool_timeout', :step, :attempt,
           now() + make_interval(secs => :timeout), version
    FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({_HISTORY})
SELECT count(*) FROM changed
"""
)

states.check_transition(states.RUNNING, states.WAITING_TOOL)

# A person must look: WAITING_APPROVAL / MANUAL_INTERVENTION (DESIGN §4). The lease is
# released; the reaper never touches WAITING_* runs.
_ESCALATE = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {_JOURNAL_APPEND},
        status = 'WAITING_APPROVAL',
        saga_status = 'MANUAL_INTERVENTION',
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        {_RELEASE_TO_WAIT}
    WHERE {_FENCE}
    RETURNING run_id, status
), history AS ({_HISTORY})
SELECT count(*) FROM changed
"""
)

# Paused at a step boundary: hand the run back; claims skip it until it is resumed.
_PAUSE_RELEASE = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET status = 'PENDING',
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = 0,
        version = version + 1,
        updated_at = now()
    WHERE {_FENCE} AND control_state = 'PAUSED'
    RETURNING run_id, status
), history AS ({_HISTORY})
SELECT count(*) FROM changed
"""
)

states.check_transition(states.RUNNING, states.WAITING_APPROVAL)


def _change(
    conn: Connection,
    statement: Any,
    c: Claim,
    entries: list[dict[str, Any]],
    kind: str,
    detail: dict[str, Any],
    **params: Any,
) -> bool:
    values = {
        **_fence_params(c),
        "entries": json.dumps(entries),
        "event_kind": {"turn_back": "saga", "pause": "control"}.get(kind, "transition"),
        "trigger_id": f"{kind}:{c.lease_epoch}",
        "detail": json.dumps(detail),
        **params,
    }
    result = (
        statement.execute(conn, values)
        if isinstance(statement, PreparedStatement)
        else conn.execute(statement, values)
    )
    return result.scalar_one() == 1


def finish(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    *,
    to_status: str,
    saga_status: str,
    output: Any = None,
    failure_code: str | None = None,
    failure_reason: str | None = None,
    messages: list[Message] | None = None,
) -> bool:
    """Record the last outcomes and end the run in the same statement, fenced; ``messages``
    (the run's outcome, to whoever was asked to approve) go to the outbox with it."""
    states.check_transition(states.RUNNING, to_status)
    detail = {"saga_status": saga_status, "failure_code": failure_code}
    return _change(
        conn,
        _FINISH,
        c,
        entries,
        "finish",
        detail,
        to_status=to_status,
        saga_status=saga_status,
        output=json.dumps(output),
        failure_code=failure_code,
        failure_reason=failure_reason,
        messages=messages_param(messages or []),
    )


def turn_back(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    next_step: str,
    failure_code: str,
    failure_reason: str,
) -> bool:
    """Freeze the compensation plan (in ``entries``) and start compensating, fenced."""
    detail = {"saga_status": "COMPENSATING", "failure_code": failure_code}
    return _change(
        conn,
        _TURN_BACK,
        c,
        entries,
        "turn_back",
        detail,
        next_step=next_step,
        failure_code=failure_code,
        failure_reason=failure_reason,
    )


def retry_later(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    delay: float,
    step: str,
    phase: str,
    attempt: int,
    saga_status: str | None = None,
) -> bool:
    """Release the run until ``delay`` s from now and set its wake-up timer, fenced."""
    timer_id = f"{c.run_id}:{phase}:{step}:retry:{attempt}"
    detail = {"step": step, "phase": phase, "attempt": attempt, "delay": round(delay, 3)}
    return _change(
        conn,
        _RETRY_LATER,
        c,
        entries,
        "retry",
        detail,
        delay=delay,
        timer_id=timer_id,
        saga_status=saga_status,
        step=step,
        attempt=attempt,
    )


def wait_for_tool(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    step: str,
    attempt: int,
    timeout: float,
) -> bool:
    """Release the run to WAITING_TOOL and set the tool-result timeout timer, fenced."""
    timer_id = f"{c.run_id}:forward:{step}:tool_timeout:{attempt}"
    detail = {"step": step, "attempt": attempt, "timeout": timeout}
    return _change(
        conn,
        _WAIT_TOOL,
        c,
        entries,
        "wait_tool",
        detail,
        step=step,
        attempt=attempt,
        timeout=timeout,
        timer_id=timer_id,
    )


def pause_release(conn: Connection, c: Claim) -> bool:
    """Stop at this step boundary because an operator paused the run, fenced."""
    return _change(conn, _PAUSE_RELEASE, c, [], "pause", {"control_state": "PAUSED"})


def escalate(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    failure_code: str,
    failure_reason: str,
) -> bool:
    """Hand the run to a person (manual intervention), fenced."""
    detail = {"saga_status": "MANUAL_INTERVENTION", "failure_code": failure_code}
    return _change(
        conn,
        _ESCALATE,
        c,
        entries,
        "escalate",
        detail,
        failure_code=failure_code,
        failure_reason=failure_reason,
    )


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


_GET_RUN = text(
    """
SELECT run_id, project_id, channel_type, workflow_name, workflow_version, status, saga_status,
       direction, current_step, input, output, attempt_count, max_attempts, lease_until, worker_id,
       lease_epoch, failure_code, failure_reason, saga_steps, version, control_state,
       created_at, updated_at, finished_at
FROM awooop_run_state
WHERE run_id = :run_id AND project_id = :project_id
"""
)


def get_run(conn: Connection, project_id: str, run_id: uuid.UUID | str) -> dict[str, Any] | None:
    """One run as a plain dict, scoped by project (another project's run is not found)."""
    row = conn.execute(_GET_RUN, {"run_id": run_id, "project_id": project_id}).mappings().first()
    return dict(row) if row is not None else None


_RELEASE = text(
    f"""
WITH released AS (
    UPDATE awooop_run_state
    SET status = 'PENDING',
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = attempt_count - 1,
        available_at = now() + make_interval(secs => :delay),
        enqueued_at = now() + make_interval(secs => :delay),
        version = version + 1,
        updated_at = now()
    WHERE {_FENCE}
    RETURNING run_id
)
INSERT INTO awooop_run_event
    (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
SELECT run_id, 'lease', 'RUNNING', 'PENDING', 'worker', 'release:' || CAST(:lease_epoch AS text),
       :worker_id, jsonb_build_object('reason', CAST(:reason AS text))
FROM released
"""
)


def release(conn: Connection, c: Claim, delay_seconds: float, reason: str) -> bool:
    """Hand the run back untouched (nothing was attempted), claimable after ``delay_seconds``."""
    return (
        conn.execute(
            _RELEASE, {**_fence_params(c), "delay": delay_seconds, "reason": reason}
        ).rowcount
        == 1
    )


_ACTIVE_DEFINITIONS = text(
    """
SELECT workflow_name, workflow_version, workflow_digest, count(*) AS runs
FROM awooop_run_state
WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')
GROUP BY workflow_name, workflow_version, workflow_digest
ORDER BY workflow_name, workflow_version
"""
)


def active_definitions(conn: Connection) -> list[tuple[str, int, str, int]]:
    """(name, version, digest, runs) of every workflow definition unfinished runs use."""
    return [tuple(r) for r in conn.execute(_ACTIVE_DEFINITIONS)]


# A step with a timeout: name it the current step and set its timeout timer, fenced. The
# timer carries the segment's version (step records do not change it), so it goes stale as
# soon as the segment ends.
_ARM_STEP_TIMEOUT = text(
    f"""
WITH armed AS (
    UPDATE awooop_run_state
    SET current_step = :step, heartbeat_at = now()
    WHERE {_FENCE}
    RETURNING run_id, version
)
INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
SELECT :timer_id, run_id, 'step_timeout', :step, :attempt,
       now() + make_interval(secs => :timeout), version
FROM armed
ON CONFLICT (timer_id) DO NOTHING
RETURNING timer_id
"""
)


def arm_step_timeout(conn: Connection, c: Claim, step: str, attempt: int, timeout: float) -> bool:
    timer_id = f"{c.run_id}:forward:{step}:step_timeout:{attempt}:{c.lease_epoch}"
    row = conn.execute(
        _ARM_STEP_TIMEOUT,
        {
            **_fence_params(c),
            "step": step,
            "attempt": attempt,
            "timeout": timeout,
            "timer_id": timer_id,
        },
    ).first()
    return row is not None
