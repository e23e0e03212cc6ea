"""Statements on ``awooop_outbox``.

Messages are inserted by the statements that change a run (:data:`INSERT_FROM_CHANGED` is
the fragment they share), so a message exists exactly when its cause committed. A sender
claims a due message with ``SKIP LOCKED`` and holds it for a while (a crashed sender's
message becomes due again), then marks it SENT, due again later, or PARKED.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from awooop.outbound.messages import Message
from awooop.store.literals import status_of_named_row

# A CTE body: insert :messages (a JSON array of Message rows) for the run(s) in ``changed``
# (which must return project_id and run_id).
INSERT_FROM_CHANGED = """
    INSERT INTO awooop_outbox (project_id, run_id, channel, purpose, payload, sealed)
    SELECT c.project_id, c.run_id, m.channel, m.purpose, m.payload, m.sealed
    FROM changed c,
         jsonb_to_recordset(CAST(:messages AS jsonb))
             AS m(channel text, purpose text, payload jsonb, sealed text)
    RETURNING message_id
"""


def messages_param(messages: list[Message]) -> str:
    return json.dumps([m.row() for m in messages])


_INSERT = text(
    """
INSERT INTO awooop_outbox (project_id, run_id, channel, purpose, payload, sealed)
SELECT :project_id, :run_id, m.channel, m.purpose, m.payload, m.sealed
FROM jsonb_to_recordset(CAST(:messages AS jsonb))
    AS m(channel text, purpose text, payload jsonb, sealed text)
RETURNING message_id
"""
)


def add(
    conn: Connection, project_id: str, run_id: uuid.UUID | None, messages: list[Message]
) -> list[uuid.UUID]:
    """Insert messages not tied to a run change (e.g. answering a refused button press)."""
    if not messages:
        return []
    params = {"project_id": project_id, "run_id": run_id, "messages": messages_param(messages)}
    return [r.message_id for r in conn.execute(_INSERT, params)]


# A statement that names its message reads it by its key, however many are unsent.
_PENDING_HERE = status_of_named_row(["PENDING"])
_PARKED_HERE = status_of_named_row(["PARKED"])

_CLAIM = text(
    f"""
UPDATE awooop_outbox o
SET claimed_until = now() + make_interval(secs => :hold_seconds),
    attempts = o.attempts + 1
WHERE o.message_id = (
    SELECT message_id FROM awooop_outbox
    WHERE message_id = :message_id AND {_PENDING_HERE} AND next_attempt_at <= now()
      AND (claimed_until IS NULL OR claimed_until < now())
    FOR UPDATE SKIP LOCKED
)
RETURNING o.message_id, o.project_id, o.run_id, o.channel, o.purpose, o.payload, o.sealed,
          o.attempts, CAST(floor(extract(epoch FROM now())) AS bigint) AS attempted_at,
          (SELECT r.traceparent FROM awooop_run_state r WHERE r.run_id = o.run_id)
            AS traceparent
"""
)


@dataclass(frozen=True)
class Claimed:
    message_id: uuid.UUID
    project_id: str
    run_id: uuid.UUID | None
    channel: str
    purpose: str
    payload: dict[str, Any]
    sealed: str | None
    attempts: int  # including this one
    attempted_at: int  # the database clock at the claim, whole seconds since the epoch
    traceparent: str | None = None  # the run's trace context (spans of the send join it)


def claim(conn: Connection, message_id: uuid.UUID, hold_seconds: float) -> Claimed | None:
    """Take a due message to send it; None when it is not due, sent, parked or held."""
    row = conn.execute(_CLAIM, {"message_id": message_id, "hold_seconds": hold_seconds}).first()
    return None if row is None else Claimed(**row._mapping)


_SENT = text(
    f"""
UPDATE awooop_outbox
SET status = 'SENT', sent_at = now(), sealed = NULL, claimed_until = NULL, last_error = NULL
WHERE message_id = :message_id AND {_PENDING_HERE} AND attempts = :attempts
"""
)

_FAILED = text(
    f"""
UPDATE awooop_outbox
SET status = CASE WHEN :park THEN 'PARKED' ELSE 'PENDING' END,
    next_attempt_at = now() + make_interval(secs => :delay),
    claimed_until = NULL,
    last_error = :error
WHERE message_id = :message_id AND {_PENDING_HERE} AND attempts = :attempts
"""
)


def mark_sent(conn: Connection, m: Claimed) -> bool:
    """SENT, and the sealed token wiped: nothing secret stays behind."""
    params = {"message_id": m.message_id, "attempts": m.attempts}
    return conn.execute(_SENT, params).rowcount == 1


def mark_failed(conn: Connection, m: Claimed, error: str, delay: float, park: bool) -> bool:
    """Due again after ``delay`` seconds, or PARKED (kept and visible, never retried)."""
    params = {
        "message_id": m.message_id,
        "attempts": m.attempts,
        "error": error[:2000],
        "delay": delay,
        "park": park,
    }
    return conn.execute(_FAILED, params).rowcount == 1


_DUE = text(
    """
SELECT message_id FROM awooop_outbox
WHERE status = 'PENDING' AND next_attempt_at <= now()
  AND (claimed_until IS NULL OR claimed_until < now())
ORDER BY next_attempt_at
LIMIT :batch_size
"""
)


def due(conn: Connection, batch_size: int) -> list[uuid.UUID]:
    """Messages to send now (the sweep sends a task for each; the claim settles races)."""
    return [r.message_id for r in conn.execute(_DUE, {"batch_size": batch_size})]


_RETRY_PARKED = text(
    f"""
UPDATE awooop_outbox
SET status = 'PENDING', attempts = 0, next_attempt_at = now(), last_error = NULL
WHERE message_id = :message_id AND {_PARKED_HERE}
RETURNING message_id
"""
)


def retry_parked(conn: Connection, message_id: uuid.UUID) -> bool:
    return conn.execute(_RETRY_PARKED, {"message_id": message_id}).first() is not None


_LIST = text(
    """
SELECT message_id, project_id, run_id, channel, purpose, status, attempts, last_error,
       created_at, sent_at
FROM awooop_outbox
WHERE (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:run_id AS uuid) IS NULL OR run_id = CAST(:run_id AS uuid))
  AND (CAST(:project_id AS text) IS NULL OR project_id = :project_id)
ORDER BY created_at DESC
LIMIT :limit
"""
)


def list_messages(
    conn: Connection,
    status: str | None = None,
    run_id: uuid.UUID | None = None,
    limit: int = 100,
    project_id: str | None = None,
) -> list[dict[str, Any]]:
    """Messages, newest first, optionally only one status, run or project. No payloads and no
    sealed secrets: what was sent and how it went."""
    params = {"status": status, "run_id": run_id, "limit": limit, "project_id": project_id}
    return [dict(r._mapping) for r in conn.execute(_LIST, params)]
