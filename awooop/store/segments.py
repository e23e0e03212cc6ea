"""A lease holder's writes while it drives a run segment: step records, and the statements
that end a segment (finish, turn back, retry later, wait for a tool, escalate, pause).

Each is one statement carrying :data:`awooop.store.leases.FENCE` — a compare-and-set on the
lease, the saga status the holder last saw and the journal's length. A statement that
matched no row wrote nothing: the caller reads :func:`awooop.store.leases.position` to tell
a lost lease from an intent recorded meanwhile (DESIGN §9.2). Each statement that changes
the run's state bumps ``version`` and writes one ``awooop_run_event`` row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.outbound.messages import Message
from awooop.store import interventions
from awooop.store.leases import FENCE, Claim, fence_params
from awooop.store.outbox import INSERT_FROM_CHANGED, messages_param
from awooop.store.prepared import PreparedStatement

for _from, _to in [
    (states.RUNNING, states.COMPLETED),
    (states.RUNNING, states.FAILED),
    (states.RUNNING, states.CANCELLED),
    (states.RUNNING, states.PENDING),
    (states.RUNNING, states.WAITING_TOOL),
    (states.RUNNING, states.WAITING_APPROVAL),
]:
    states.check_transition(_from, _to)

# Journal entries get the database's clock as recorded_at, in the order given.
JOURNAL_APPEND = (
    "saga_steps = saga_steps || (SELECT jsonb_agg(e || jsonb_build_object('recorded_at', now())"
    " ORDER BY n) FROM jsonb_array_elements(CAST(:entries AS jsonb)) WITH ORDINALITY AS x(e, n))"
)

# Entering a WAITING_* state (DESIGN §4): the lease is released and the crash budget
# (attempt_count) starts again — the work before the wait succeeded.
RELEASE_TO_WAIT = "lease_until = NULL, attempt_count = 0, version = version + 1, updated_at = now()"

# A step record is not a transition: the journal entry is its history (no run_event row).
# It commits without waiting for the WAL flush (DESIGN §8): a record lost in a server crash
# is a step whose worker died before recording it — the run's lease expires, the reaper hands
# it on, and the step runs again under the same effect id. Claims, admissions and the
# statements that end a segment stay synchronous; the first of them flushes this record too.
_RECORD_STEP = PreparedStatement(
    "awooop_record_step",
    f"""
UPDATE awooop_run_state
SET {JOURNAL_APPEND},
    current_step = :next_step,
    saga_status = CASE WHEN saga_status = 'WAITING_RESOLUTION' THEN 'RUNNING'
                       ELSE saga_status END,
    heartbeat_at = now(),
    updated_at = now()
WHERE {FENCE}
RETURNING control_state, saga_status, failure_code
""",
    synchronous_commit=False,
)


@dataclass(frozen=True)
class Steering:
    """What operators (or the run deadline) asked of a run, read back by every step record
    (no extra query), and the saga status the record left."""

    paused: bool = False
    cancelling: bool = False
    # Why it is cancelling: E-SAGA-002 (an operator) or E-SAGA-003 (the run deadline).
    cause: str | None = None
    saga_status: str | None = None

    @classmethod
    def of(cls, saga_status: str, failure_code: str | None, paused: bool) -> Steering:
        return cls(
            paused=paused,
            cancelling=saga_status == "CANCELLING",
            cause=failure_code,
            saga_status=saga_status,
        )


def record_step(
    conn: Connection, c: Claim, entries: list[dict[str, Any]], next_step: str | None
) -> Steering | None:
    """Append step outcomes to the journal, fenced. None: nothing written (the lease is gone,
    or the run is not where ``c`` saw it — ask :func:`awooop.store.leases.position`)."""
    params = {**fence_params(c), "entries": json.dumps(entries), "next_step": next_step}
    row = _RECORD_STEP.execute(conn, params).first()
    if row is None:
        return None
    return Steering.of(row.saga_status, row.failure_code, row.control_state == "PAUSED")


# Every statement below changes the run's state: it bumps ``version`` and writes one
# awooop_run_event row (trigger "worker", one per kind and lease epoch).
HISTORY = """
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
    SET {JOURNAL_APPEND},
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
    WHERE {FENCE}
    RETURNING run_id, project_id, status
), outbox AS ({INSERT_FROM_CHANGED}
), history AS ({HISTORY})
SELECT count(*) FROM changed
""",
)

_TURN_BACK = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        saga_status = 'COMPENSATING',
        direction = 'BACKWARD',
        current_step = :next_step,
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        version = version + 1,
        updated_at = now()
    WHERE {FENCE}
    RETURNING run_id, status
), history AS ({HISTORY})
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
    SET {JOURNAL_APPEND},
        status = 'PENDING',
        saga_status = COALESCE(:saga_status, saga_status),
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = 0,
        available_at = now() + make_interval(secs => :delay),
        enqueued_at = now() + make_interval(secs => :delay),
        version = version + 1,
        updated_at = now()
    WHERE {FENCE}
    RETURNING run_id, status, available_at, version
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'retry', :step, :attempt, available_at, version FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({HISTORY})
SELECT count(*) FROM changed
"""
)

# A tool call went out: release the worker until the result, or the timeout timer.
_WAIT_TOOL = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        status = 'WAITING_TOOL',
        current_step = :step,
        {RELEASE_TO_WAIT}
    WHERE {FENCE}
    RETURNING run_id, status, version
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'tool_timeout', :step, :attempt,
           now() + make_interval(secs => :timeout), version
    FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({HISTORY})
SELECT count(*) FROM changed
"""
)


# A person must look: WAITING_APPROVAL / MANUAL_INTERVENTION (DESIGN §4). The lease is
# released; the reaper never touches WAITING_* runs.
_ESCALATE = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        status = 'WAITING_APPROVAL',
        saga_status = 'MANUAL_INTERVENTION',
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        {RELEASE_TO_WAIT}
    WHERE {FENCE}
    RETURNING run_id, project_id, status, current_step, failure_reason
), intervention AS ({interventions.OPEN_FROM_CHANGED}
), history AS ({HISTORY})
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
    WHERE {FENCE} AND control_state = 'PAUSED'
    RETURNING run_id, status
), history AS ({HISTORY})
SELECT count(*) FROM changed
"""
)


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
        **fence_params(c),
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


# Before every forward step that is not a tool call: name it the current step and set its
# timeout timer, fenced. The timer carries the segment's version (step records do not change
# it), so it goes stale as soon as the segment ends. Prepared, and committed without waiting
# for the WAL flush like a step record: the WAL writer flushes it within three
# wal_writer_delay (0.6 s by default), so only a server crash in that window loses it, and
# with it the timeout of that one attempt (awooop_running_oldest_progress_age_seconds still
# shows the run if its handler then hangs).
_ARM_STEP_TIMEOUT = PreparedStatement(
    "awooop_arm_step_timeout",
    f"""
WITH armed AS (
    UPDATE awooop_run_state
    SET current_step = :step, heartbeat_at = now()
    WHERE {FENCE}
    RETURNING run_id, version
), timer AS (
    -- the same timer again when this statement is retried after its reply was lost
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'step_timeout', :step, :attempt,
           now() + make_interval(secs => :timeout), version
    FROM armed
    ON CONFLICT (timer_id) DO NOTHING
)
SELECT count(*) FROM armed
""",
    synchronous_commit=False,
)


def arm_step_timeout(conn: Connection, c: Claim, step: str, attempt: int, timeout: float) -> bool:
    """Set the timeout timer of this attempt of ``step``, fenced; False: nothing written."""
    timer_id = f"{c.run_id}:forward:{step}:step_timeout:{attempt}:{c.lease_epoch}"
    row = _ARM_STEP_TIMEOUT.execute(
        conn,
        {
            **fence_params(c),
            "step": step,
            "attempt": attempt,
            "timeout": timeout,
            "timer_id": timer_id,
        },
    ).scalar_one()
    return bool(row == 1)
