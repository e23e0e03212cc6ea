"""A lease holder's writes while it drives a run segment: step records, and the statements
that end a segment (finish, turn back, retry later, wait for a tool, escalate, pause).

Each is one statement carrying :data:`awooop.store.leases.FENCE` — a compare-and-set on the
lease, the saga status the holder last saw and the journal's length — and stamping the
write's identity (:data:`awooop.store.leases.STAMP`). Each returns where it left the run
(:class:`awooop.store.leases.Position`), or None when it matched no row and wrote nothing:
the caller asks :func:`awooop.store.leases.after_miss` whether an earlier try of it committed,
an intent was recorded meanwhile, or the lease is gone. Each statement that
changes the run's state bumps ``version`` and writes one ``awooop_run_event`` row.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.outbound.messages import Message
from awooop.store import interventions, jsonb
from awooop.store.leases import FENCE, HELD_AT, STAMP, Claim, Position, fence_params, lease_params
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

# Journal entries get the database's clock as recorded_at, in the order given. The tags an
# attempt set (its entry's "tags", from ctx.tag) join the run's in the same assignment list,
# so they are written by the statement that records the attempt, under the same fence; an
# append that carries no tags leaves the column as it was (still a HOT update). Planned for
# its parameters, the CASE folds away: a prepared statement that appends runs on its
# generic plan (``generic_plan=True``), or it would be planned at every execution.
JOURNAL_APPEND = (
    "saga_steps = saga_steps || (SELECT jsonb_agg(e || jsonb_build_object('recorded_at', now())"
    " ORDER BY n) FROM jsonb_array_elements(CAST(:entries AS jsonb)) WITH ORDINALITY AS x(e, n)),"
    " tags = CASE WHEN jsonb_path_exists(CAST(:entries AS jsonb), '$[*].tags')"
    " THEN COALESCE(tags, '{}'::jsonb) || (SELECT jsonb_object_agg(t.key, t.value ORDER BY x.n)"
    " FROM jsonb_array_elements(CAST(:entries AS jsonb)) WITH ORDINALITY AS x(e, n),"
    " jsonb_each(x.e -> 'tags') AS t) ELSE tags END"
)

# Entering a WAITING_* state: the lease is released and the crash budget
# (attempt_count) starts again — the work before the wait succeeded.
RELEASE_TO_WAIT = "lease_until = NULL, attempt_count = 0, version = version + 1, updated_at = now()"

# A step record is not a transition: the journal entry is its history (no run_event row).
# It commits without waiting for the WAL flush: a record lost in a server crash
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
    {STAMP},
    heartbeat_at = now(),
    updated_at = now()
WHERE {FENCE}
RETURNING control_state, saga_status, failure_code
""",
    synchronous_commit=False,
    generic_plan=True,
)


def record_step(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    next_step: str | None,
    *,
    write_id: uuid.UUID | None = None,
) -> Position | None:
    """Append step outcomes to the journal, fenced. Where the record left the run — with
    the intents recorded on it, read back at no extra cost — or None: nothing written."""
    params = {
        **fence_params(c, write_id),
        "entries": jsonb.dumps_entries(entries),
        "next_step": next_step,
    }
    row = _RECORD_STEP.execute(conn, params).first()
    if row is None:
        return None
    return _position(row, c, entries)


def _position(row: Any, c: Claim, entries: list[dict[str, Any]]) -> Position:
    """Where a write that appended ``entries`` left the run (``row``: its RETURNING)."""
    return Position(
        row.saga_status,
        row.failure_code,
        row.control_state == "PAUSED",
        c.journal_length + len(entries),
    )


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
        {STAMP},
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
    RETURNING run_id, project_id, status, saga_status, failure_code, control_state
), outbox AS ({INSERT_FROM_CHANGED}
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state FROM changed
""",
    generic_plan=True,
)

_TURN_BACK = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        {STAMP},
        saga_status = 'COMPENSATING',
        direction = 'BACKWARD',
        current_step = :next_step,
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        version = version + 1,
        updated_at = now()
    WHERE {FENCE}
    RETURNING run_id, status, saga_status, failure_code, control_state
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state FROM changed
"""
)


def _release_until(delay: str) -> str:
    """SET items: back to PENDING with no lease, claimable — and its message due, for the
    orphan sweep — ``delay`` (an SQL expression, seconds) from now. The segment ended
    cleanly, so the crash budget (attempt_count) starts again."""
    return f"""status = 'PENDING',
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = 0,
        available_at = now() + make_interval(secs => {delay}),
        enqueued_at = now() + make_interval(secs => {delay}),
        version = version + 1,
        updated_at = now()"""


# Back to PENDING until ``delay`` from now; the retry timer wakes it (the orphan sweep is the
# backstop: enqueued_at is set to the wake-up time). The segment ended cleanly, so the crash
# budget (attempt_count) starts again.
_RETRY_LATER = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        {STAMP},
        saga_status = COALESCE(:saga_status, saga_status),
        {_release_until(":delay")}
    WHERE {FENCE}
    RETURNING run_id, status, available_at, version, saga_status, failure_code, control_state
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'retry', :step, :attempt, available_at, version FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state FROM changed
"""
)

# A wait step: back to PENDING, no lease, until its signal comes (the delivery wakes it) or
# ``delay`` passes (its timer, and the orphan sweep, send its message then). The run row is
# locked first, in the same round trip, and the statement's snapshot is taken after that:
# a signal delivered before the lock is seen here (the run is claimable at once: ``woken``),
# one delivered after it finds the run waiting and wakes it. ``:signal`` is NULL for a sleep.
_WAIT = text(
    f"""
SELECT 1 FROM awooop_run_state WHERE run_id = :run_id FOR UPDATE;
WITH signalled AS (
    SELECT EXISTS (
        SELECT 1 FROM awooop_signal s
        WHERE s.run_id = :run_id AND s.name = :signal AND s.seq > :after_seq
    ) AS yes
), changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        {STAMP},
        current_step = :step,
        {_release_until("CASE WHEN (SELECT yes FROM signalled) THEN 0 ELSE :delay END")}
    WHERE {FENCE}
    RETURNING run_id, status, available_at, version, saga_status, failure_code, control_state
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'retry', :step, :attempt, available_at, version FROM changed
    WHERE NOT (SELECT yes FROM signalled)
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state, (SELECT yes FROM signalled) AS woken
FROM changed
"""
)

# A tool call went out: release the worker until the result, or the timeout timer.
_WAIT_TOOL = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        {STAMP},
        status = 'WAITING_TOOL',
        current_step = :step,
        {RELEASE_TO_WAIT}
    WHERE {FENCE}
    RETURNING run_id, status, version, saga_status, failure_code, control_state
), timer AS (
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'tool_timeout', :step, :attempt,
           now() + make_interval(secs => :timeout), version
    FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state FROM changed
"""
)


# A person must look: WAITING_APPROVAL / MANUAL_INTERVENTION. The lease is
# released; the reaper never touches WAITING_* runs.
_ESCALATE = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        {STAMP},
        status = 'WAITING_APPROVAL',
        saga_status = 'MANUAL_INTERVENTION',
        failure_code = :failure_code,
        failure_reason = :failure_reason,
        {RELEASE_TO_WAIT}
    WHERE {FENCE}
    RETURNING run_id, project_id, status, current_step, failure_reason,
              saga_status, failure_code, control_state
), intervention AS ({interventions.OPEN_FROM_CHANGED}
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state FROM changed
"""
)

# Paused at a step boundary: hand the run back; claims skip it until it is resumed.
_PAUSE_RELEASE = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET status = 'PENDING',
        {STAMP},
        lease_until = NULL,
        worker_id = NULL,
        attempt_count = 0,
        version = version + 1,
        updated_at = now()
    WHERE {FENCE} AND control_state = 'PAUSED'
    RETURNING run_id, status, saga_status, failure_code, control_state
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state FROM changed
"""
)


def _change(
    conn: Connection,
    statement: Any,
    c: Claim,
    entries: list[dict[str, Any]],
    kind: str,
    detail: dict[str, Any],
    write_id: uuid.UUID | None,
    **params: Any,
) -> Position | None:
    row = _changed_row(conn, statement, c, entries, kind, detail, write_id, **params)
    return None if row is None else _position(row, c, entries)


def _changed_row(
    conn: Connection,
    statement: Any,
    c: Claim,
    entries: list[dict[str, Any]],
    kind: str,
    detail: dict[str, Any],
    write_id: uuid.UUID | None,
    **params: Any,
) -> Any:
    """Run a state-changing segment statement; its row, or None when it matched none."""
    values = {
        **fence_params(c, write_id),
        "entries": jsonb.dumps_entries(entries),
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
    return result.first()


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
    write_id: uuid.UUID | None = None,
) -> Position | None:
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
        write_id,
        to_status=to_status,
        saga_status=saga_status,
        output=jsonb.dumps_output(output, entries),
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
    *,
    write_id: uuid.UUID | None = None,
) -> Position | None:
    """Freeze the compensation plan (in ``entries``) and start compensating, fenced."""
    detail = {"saga_status": "COMPENSATING", "failure_code": failure_code}
    return _change(
        conn,
        _TURN_BACK,
        c,
        entries,
        "turn_back",
        detail,
        write_id,
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
    *,
    write_id: uuid.UUID | None = None,
) -> Position | None:
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
        write_id,
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
    *,
    write_id: uuid.UUID | None = None,
) -> Position | None:
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
        write_id,
        step=step,
        attempt=attempt,
        timeout=timeout,
        timer_id=timer_id,
    )


def wait(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    step: str,
    attempt: int,
    delay: float,
    signal: str | None,
    after_seq: int,
    *,
    write_id: uuid.UUID | None = None,
) -> tuple[Position, bool] | None:
    """Release the run to wait (a sleep, or a wait for ``signal``) ``delay`` seconds at
    most, fenced. Where it left the run, and whether a signal of that name (``seq`` above
    ``after_seq``) was there already — then the run is claimable at once: send its message."""
    timer_id = f"{c.run_id}:forward:{step}:wait:{attempt}:{c.lease_epoch}"
    detail = {"step": step, "attempt": attempt, "signal": signal, "delay": round(delay, 3)}
    row = _changed_row(
        conn,
        _WAIT,
        c,
        entries,
        "wait",
        detail,
        write_id,
        step=step,
        attempt=attempt,
        delay=delay,
        signal=signal,
        after_seq=after_seq,
        timer_id=timer_id,
    )
    return None if row is None else (_position(row, c, entries), bool(row.woken))


def pause_release(
    conn: Connection, c: Claim, *, write_id: uuid.UUID | None = None
) -> Position | None:
    """Stop at this step boundary because an operator paused the run, fenced."""
    return _change(conn, _PAUSE_RELEASE, c, [], "pause", {"control_state": "PAUSED"}, write_id)


def escalate(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    failure_code: str,
    failure_reason: str,
    *,
    write_id: uuid.UUID | None = None,
) -> Position | None:
    """Hand the run to a person (manual intervention), fenced."""
    detail = {"saga_status": "MANUAL_INTERVENTION", "failure_code": failure_code}
    return _change(
        conn,
        _ESCALATE,
        c,
        entries,
        "escalate",
        detail,
        write_id,
        failure_code=failure_code,
        failure_reason=failure_reason,
    )


# A step with a timeout: name it the current step and set its timeout timer, fenced. The
# timer carries the segment's version (step records do not change it), so it goes stale as
# soon as the segment ends.
_ARM_STEP_TIMEOUT = text(
    f"""
WITH armed AS (
    UPDATE awooop_run_state
    SET current_step = :step, {STAMP}, heartbeat_at = now()
    WHERE {FENCE}
    RETURNING run_id, version, saga_status, failure_code, control_state
), timer AS (
    -- the same timer again when this statement is retried after its reply was lost
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'step_timeout', :step, :attempt,
           now() + make_interval(secs => :timeout), version
    FROM armed
    ON CONFLICT (timer_id) DO NOTHING
)
SELECT saga_status, failure_code, control_state FROM armed
"""
)


# A step that has run for a while without a timeout of its own gets the deployment's default
# (armed by the holder's lease keeper, off the step's path: a quick step costs nothing). Fenced
# on the lease and the journal as the step started, not on the saga status: a cancel recorded
# meanwhile is seen only at the step's end, which a hung handler never reaches. It skips a
# row someone holds locked (an operator's session): the keeper tries again at its next tick
# instead of queueing behind the lock.
_ARM_DEFAULT_STEP_TIMEOUT = text(
    f"""
WITH run AS (
    UPDATE awooop_run_state
    SET current_step = :step
    WHERE run_id = (SELECT run_id FROM awooop_run_state
                    WHERE {HELD_AT}
                    FOR NO KEY UPDATE SKIP LOCKED)
    RETURNING run_id, version
)
INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
SELECT :timer_id, run_id, 'step_timeout', :step, :attempt,
       now() + make_interval(secs => :remaining), version
FROM run
ON CONFLICT (timer_id) DO NOTHING
"""
)


def arm_default_step_timeout(
    conn: Connection, c: Claim, step: str, attempt: int, remaining: float
) -> bool:
    """Set the timeout timer of this attempt of ``step``, due in ``remaining`` seconds, if
    ``c`` still holds the run as the step found it; False: nothing written."""
    params = {
        **lease_params(c),
        "journal_length": c.journal_length,
        "timer_id": step_timer_id(c, step, attempt),
        "step": step,
        "attempt": attempt,
        "remaining": max(0.0, remaining),
    }
    return conn.execute(_ARM_DEFAULT_STEP_TIMEOUT, params).rowcount == 1


def step_timer_id(c: Claim, step: str, attempt: int) -> str:
    """The timeout timer of this attempt of ``step`` under this claim."""
    return f"{c.run_id}:forward:{step}:step_timeout:{attempt}:{c.lease_epoch}"


def arm_step_timeout(
    conn: Connection,
    c: Claim,
    step: str,
    attempt: int,
    timeout: float,
    *,
    write_id: uuid.UUID | None = None,
) -> Position | None:
    """Name ``step`` the current step and set its timeout timer, fenced."""
    timer_id = step_timer_id(c, step, attempt)
    row = conn.execute(
        _ARM_STEP_TIMEOUT,
        {
            **fence_params(c, write_id),
            "step": step,
            "attempt": attempt,
            "timeout": timeout,
            "timer_id": timer_id,
        },
    ).first()
    return None if row is None else _position(row, c, [])
