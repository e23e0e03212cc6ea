"""Statements on ``awooop_approval``: waiting for a person, deciding, expiring.

Entering an approval is one fenced statement: the journal entry, WAITING_APPROVAL with the
lease released and ``attempt_count`` reset, the approval row (token hash only), the prompt
in the outbox, the expiry timer, the history row. Deciding is one statement too: the
approval row goes from PENDING to its decision only while it is unexpired and its run still
waits at its step (so a token is single-use, and worthless once the run has moved on), and
in the same statement the decision is journaled, the run RESUMED and the reply queued.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.outbound.messages import Message
from awooop.store import jsonb
from awooop.store.leases import FENCE, STAMP, Claim, Position, fence_params
from awooop.store.literals import status_of_named_row
from awooop.store.outbox import INSERT_FROM_CHANGED, messages_param
from awooop.store.segments import HISTORY, JOURNAL_APPEND, RELEASE_TO_WAIT

if TYPE_CHECKING:
    from awooop.store.timers import FiredTimer

states.check_transition(states.RUNNING, states.WAITING_APPROVAL)
states.check_transition(states.WAITING_APPROVAL, states.RESUMED)

_WAIT = text(
    f"""
WITH changed AS (
    UPDATE awooop_run_state
    SET {JOURNAL_APPEND},
        {STAMP},
        status = 'WAITING_APPROVAL',
        current_step = :step,
        {RELEASE_TO_WAIT}
    WHERE {FENCE}
    RETURNING run_id, project_id, status, version, saga_status, failure_code, control_state
), approval AS (
    INSERT INTO awooop_approval
        (token_hash, project_id, run_id, step, attempt, action, approvers, prompt, expires_at)
    SELECT :token_hash, project_id, run_id, :step, :attempt, :action,
           CAST(:approvers AS jsonb), :prompt, now() + make_interval(secs => :ttl)
    FROM changed
    RETURNING approval_id, run_id
), timer AS (
    -- Valid whatever the run's version (-1): a pause must not disarm the expiry; the
    -- effect itself checks that the approval is still pending.
    INSERT INTO awooop_timer (timer_id, run_id, kind, step, attempt, due_at, expected_version)
    SELECT :timer_id, run_id, 'approval_expiry', :step, :attempt,
           now() + make_interval(secs => :ttl), -1
    FROM changed
    ON CONFLICT (timer_id) DO NOTHING
), outbox AS ({INSERT_FROM_CHANGED}
), history AS ({HISTORY})
SELECT saga_status, failure_code, control_state,
       (SELECT array_agg(message_id) FROM outbox) AS message_ids
FROM changed
"""
)


def wait_for_approval(
    conn: Connection,
    c: Claim,
    entries: list[dict[str, Any]],
    *,
    step: str,
    attempt: int,
    ttl_seconds: float,
    token_hash: str,
    action: str,
    approvers: dict[str, Any],
    prompt: str,
    messages: list[Message],
    write_id: uuid.UUID | None = None,
) -> tuple[Position, list[uuid.UUID]] | None:
    """Release the run to WAITING_APPROVAL, fenced: where it left the run, and the prompt's
    outbox message ids; None when it matched no row (nothing written)."""
    params = {
        **fence_params(c, write_id),
        "entries": jsonb.dumps_entries(entries),
        "event_kind": "transition",
        "trigger_id": f"wait_approval:{c.lease_epoch}",
        "detail": json.dumps({"step": step, "action": action, "ttl_seconds": ttl_seconds}),
        "step": step,
        "attempt": attempt,
        "ttl": ttl_seconds,
        "token_hash": token_hash,
        "action": action,
        "approvers": json.dumps(approvers),
        "prompt": prompt,
        "timer_id": f"{c.run_id}:approval:{step}:{attempt}",
        "messages": messages_param(messages),
    }
    row = conn.execute(_WAIT, params).first()
    if row is None:
        return None
    waiting = Position(
        row.saga_status,
        row.failure_code,
        row.control_state == "PAUSED",
        c.journal_length + len(entries),
    )
    return waiting, list(row.message_ids or [])


_UNSENT_PROMPTS = text(
    """
SELECT message_id FROM awooop_outbox
WHERE run_id = :run_id AND purpose = 'approval_prompt' AND status = 'PENDING'
"""
)


def unsent_prompts(conn: Connection, run_id: uuid.UUID) -> list[uuid.UUID]:
    """The run's approval prompts not sent yet (to send those a request queued when its
    reply was lost)."""
    return [r.message_id for r in conn.execute(_UNSENT_PROMPTS, {"run_id": run_id})]


# The run still waits for this approval (a: the approval row, r: its run): a token is worth
# nothing once the run has moved on. Deciding and expiring test it on the run row they have
# locked first (FOR UPDATE re-reads a row changed while it waited), so a cancel or a claim
# committed meanwhile is seen, never overwritten.
_WAITING_HERE = (
    f"r.run_id = a.run_id AND {status_of_named_row(['WAITING_APPROVAL'], 'r.status')}"
    " AND r.saga_status = 'RUNNING' AND r.current_step = a.step"
)
# A decision names its approval: read by its key, however many are pending.
_APPROVAL_PENDING = status_of_named_row(["PENDING"], "a.status")
# A decision (or the expiry) hands the run back to the workers, with a fresh crash budget.
_RESUME = (
    "status = 'RESUMED', attempt_count = 0, available_at = now(), enqueued_at = now(),"
    " version = r.version + 1, updated_at = now()"
)

_LOOKUP_SELECT = """
SELECT a.approval_id, a.project_id, a.run_id, a.step, a.attempt, a.action, a.approvers,
       a.status, a.expires_at, a.expires_at <= now() AS expired, a.decided_by,
       r.status AS run_status, r.saga_status, r.current_step, r.input
FROM awooop_approval a
JOIN awooop_run_state r ON r.run_id = a.run_id
"""
_LOOKUP = text(_LOOKUP_SELECT + "WHERE a.token_hash = :token_hash AND a.project_id = :project_id")
# Approvals only: an intervention (saga MANUAL_INTERVENTION) is moved on by the retry
# operations, never decided.
_LOOKUP_BY_ID = text(
    _LOOKUP_SELECT
    + "WHERE a.approval_id = :approval_id AND a.project_id = :project_id AND a.kind = 'approval'"
)


@dataclass(frozen=True)
class PendingApproval:
    approval_id: uuid.UUID
    project_id: str
    run_id: uuid.UUID
    step: str
    attempt: int
    action: str
    approvers: dict[str, Any]
    status: str
    expires_at: datetime | None
    expired: bool
    decided_by: str | None
    run_status: str
    saga_status: str
    current_step: str | None
    input: dict[str, Any]

    @property
    def run_waiting_here(self) -> bool:
        return (
            self.run_status == states.WAITING_APPROVAL
            and self.saga_status == "RUNNING"
            and self.current_step == self.step
        )


def lookup(conn: Connection, project_id: str, token_hash: str) -> PendingApproval | None:
    """The approval a token (hash) opens in this project, whatever its state."""
    row = conn.execute(_LOOKUP, {"project_id": project_id, "token_hash": token_hash}).first()
    return None if row is None else PendingApproval(**row._mapping)


def lookup_by_id(
    conn: Connection, project_id: str, approval_id: uuid.UUID
) -> PendingApproval | None:
    """The approval (not an intervention) with this id in this project, whatever its state:
    for a signed-in operator, whose token's role stands in for the approval's token."""
    params = {"project_id": project_id, "approval_id": approval_id}
    row = conn.execute(_LOOKUP_BY_ID, params).first()
    return None if row is None else PendingApproval(**row._mapping)


_DECIDE = text(
    f"""
WITH waiting AS (
    SELECT r.run_id
    FROM awooop_run_state r
    JOIN awooop_approval a ON a.run_id = r.run_id
    WHERE a.approval_id = :approval_id AND a.project_id = :project_id
      AND {_APPROVAL_PENDING} AND a.expires_at > now()
      AND {_WAITING_HERE}
    FOR UPDATE OF r
), decided AS (
    UPDATE awooop_approval a
    SET status = :status, decided_by = :actor, decided_via = :via, decided_at = now(),
        comment = :comment
    FROM waiting w
    WHERE a.approval_id = :approval_id AND a.project_id = :project_id AND a.run_id = w.run_id
      AND {_APPROVAL_PENDING}
    RETURNING a.approval_id, a.run_id, a.step, a.attempt,
              extract(epoch FROM now() - a.created_at)::float8 AS waited
), changed AS (
    UPDATE awooop_run_state r
    SET saga_steps = r.saga_steps || jsonb_build_array(jsonb_build_object(
            'phase', 'approval', 'step', d.step, 'attempt', d.attempt,
            'decision', CAST(:decision AS text), 'actor', CAST(:actor AS text),
            'via', CAST(:via AS text), 'comment', CAST(:comment AS text),
            'recorded_at', now())),
        {_RESUME}
    FROM decided d
    WHERE r.run_id = d.run_id
    RETURNING r.run_id, r.project_id, d.approval_id
), outbox AS ({INSERT_FROM_CHANGED}
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, actor, detail)
    SELECT run_id, 'transition', 'WAITING_APPROVAL', 'RESUMED', 'approval',
           approval_id::text, :actor,
           jsonb_build_object('decision', CAST(:decision AS text), 'via', CAST(:via AS text))
    FROM changed
)
SELECT (SELECT count(*) FROM changed) AS changed,
       (SELECT array_agg(message_id) FROM outbox) AS message_ids,
       (SELECT max(waited) FROM decided) AS waited
"""
)

DECISIONS = {"approve": ("APPROVED", "approved"), "reject": ("REJECTED", "rejected")}


@dataclass(frozen=True)
class Decision:
    """A decision taken: the outbox messages it queued, and how long the approval waited
    for it (seconds since it was requested, by the database clock)."""

    message_ids: list[uuid.UUID]
    waited_seconds: float


def decide(
    conn: Connection,
    project_id: str,
    approval_id: uuid.UUID,
    decision: str,
    *,
    actor: str,
    via: str,
    comment: str | None,
    messages: list[Message],
) -> Decision | None:
    """Take the decision if the approval is still open, or None when it was not (already
    decided, expired, or its run moved on) and nothing changed. The approval is named by its
    id: whoever decides was let in by :func:`lookup` (the token) or :func:`lookup_by_id` (a
    signed-in operator) first."""
    status, word = DECISIONS[decision]
    params = {
        "project_id": project_id,
        "approval_id": approval_id,
        "status": status,
        "decision": word,
        "actor": actor,
        "via": via,
        "comment": comment,
        "messages": messages_param(messages),
    }
    row = conn.execute(_DECIDE, params).one()
    if row.changed != 1:
        return None
    return Decision(list(row.message_ids or []), float(row.waited or 0.0))


# The expiry timer fired: a still-pending approval expires and the run resumes to turn back
# (the worker reads the "expired" decision: compensate, then FAILED E-APPROVAL-002).
_EXPIRE = text(
    f"""
WITH waiting AS (
    SELECT r.run_id
    FROM awooop_run_state r
    JOIN awooop_approval a ON a.run_id = r.run_id
    WHERE a.run_id = :run_id AND a.step = :step AND a.attempt = :attempt
      AND a.status = 'PENDING'
      AND {_WAITING_HERE}
    FOR UPDATE OF r
), expired AS (
    UPDATE awooop_approval a
    SET status = 'EXPIRED', decided_at = now(), decided_via = 'timer'
    FROM waiting w
    WHERE a.run_id = w.run_id AND a.step = :step AND a.attempt = :attempt
      AND a.status = 'PENDING'
    RETURNING a.approval_id, a.run_id, a.step, a.attempt
), changed AS (
    UPDATE awooop_run_state r
    SET saga_steps = r.saga_steps || jsonb_build_array(jsonb_build_object(
            'phase', 'approval', 'step', e.step, 'attempt', e.attempt,
            'decision', 'expired', 'actor', 'timer', 'recorded_at', now())),
        {_RESUME}
    FROM expired e
    WHERE r.run_id = e.run_id
    RETURNING r.run_id, r.project_id
), history AS (
    INSERT INTO awooop_run_event
        (run_id, kind, from_status, to_status, trigger, trigger_id, detail)
    SELECT run_id, 'transition', 'WAITING_APPROVAL', 'RESUMED', 'timer', :timer_id,
           jsonb_build_object('decision', 'expired', 'step', CAST(:step AS text))
    FROM changed
)
SELECT count(*) FROM changed
"""
)


def expire(conn: Connection, t: FiredTimer) -> bool:
    """The approval's TTL passed: False when it had been decided (or the run moved on)."""
    params = {"run_id": t.run_id, "step": t.step, "attempt": t.attempt, "timer_id": t.timer_id}
    return conn.execute(_EXPIRE, params).scalar_one() == 1


# How long an approval the expiry timer just expired had waited (through ix_awooop_approval_run).
_EXPIRED_WAIT = text(
    """
SELECT extract(epoch FROM decided_at - created_at)::float8
FROM awooop_approval
WHERE run_id = :run_id AND step = :step AND attempt = :attempt AND status = 'EXPIRED'
"""
)


def expired_wait(conn: Connection, t: FiredTimer) -> float | None:
    """Seconds from the request to the expiry of the approval ``t`` expired (in the
    transaction that expired it); None when there is none."""
    params = {"run_id": t.run_id, "step": t.step, "attempt": t.attempt}
    waited = conn.execute(_EXPIRED_WAIT, params).scalar()
    return None if waited is None else float(waited)


# What a person may see of a run's approvals: never the token hash.
_LIST_FOR_RUN = text(
    """
SELECT approval_id, step, attempt, action, kind, prompt, status, expires_at, decided_by,
       decided_via, decided_at, comment, created_at,
       COALESCE(approvers -> 'roles', '[]'::jsonb) AS roles
FROM awooop_approval
WHERE run_id = :run_id AND project_id = :project_id
ORDER BY created_at, approval_id
"""
)


def list_for_run(conn: Connection, project_id: str, run_id: uuid.UUID) -> list[dict[str, Any]]:
    """The run's approvals, oldest first (scoped by project; no token hashes)."""
    rows = conn.execute(_LIST_FOR_RUN, {"project_id": project_id, "run_id": run_id}).mappings()
    return [dict(r) for r in rows]


# The project's approvals a person can decide now: pending, unexpired, their run still
# waiting at their step; oldest first, by (created_at, approval_id) pages.
_PENDING = text(
    f"""
SELECT a.approval_id, a.run_id, a.step, a.attempt, a.action, a.prompt, a.expires_at,
       a.created_at, COALESCE(a.approvers -> 'roles', '[]'::jsonb) AS roles,
       r.workflow_name, r.workflow_version, r.control_state
FROM awooop_approval a
JOIN awooop_run_state r ON r.run_id = a.run_id
WHERE a.project_id = :project_id AND a.kind = 'approval' AND a.status = 'PENDING'
  AND a.expires_at > now() AND {_WAITING_HERE}
  AND (CAST(:after_at AS timestamptz) IS NULL
       OR (a.created_at, a.approval_id) > (CAST(:after_at AS timestamptz),
                                            CAST(:after_id AS uuid)))
ORDER BY a.created_at, a.approval_id
LIMIT :limit
"""
)


def pending(
    conn: Connection,
    project_id: str,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit`` approvals of the project that can be decided now, oldest first,
    after the ``(created_at, approval_id)`` position (no token hashes)."""
    params = {
        "project_id": project_id,
        "after_at": after[0] if after else None,
        "after_id": after[1] if after else None,
        "limit": limit,
    }
    return [dict(r) for r in conn.execute(_PENDING, params).mappings()]
