"""Signals (``awooop_signal``): kept for the wait steps that take them, and the wake-up of a
run waiting for one.

A run waiting for a signal is PENDING with no lease until the end of its wait, its last
forward journal entry ``WAITING`` with the signal's name. Delivery locks the run row, keeps
the signal and, if the run waits for that name, makes it claimable now — one statement. The
worker's wait (:func:`awooop.store.segments.wait`) locks the same row before it looks for a
signal, so a signal is either seen by the wait or wakes it: never neither.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store.literals import sql_list

# At most this many signals are kept per run: a sender in a loop is refused, not stored.
MAX_SIGNALS_PER_RUN = 1000

_FINISHED = sql_list(states.TERMINAL_STATUSES)

# The run's last forward journal entry (a wait step's WAITING entry while it waits).
LAST_FORWARD = """(
    SELECT x.e FROM jsonb_array_elements({journal}) WITH ORDINALITY AS x(e, n)
    WHERE x.e ->> 'phase' = 'forward' ORDER BY x.n DESC LIMIT 1
)"""

_DELIVER = text(
    f"""
WITH target AS (
    SELECT run_id, status, saga_status, {LAST_FORWARD.format(journal="t.saga_steps")} AS last
    FROM awooop_run_state t
    WHERE run_id = :run_id AND project_id = :project_id
    FOR UPDATE
), kept AS (
    INSERT INTO awooop_signal (run_id, signal_id, name, payload, payload_digest)
    SELECT run_id, :signal_id, :name, CAST(:payload AS jsonb), :digest FROM target
    WHERE status NOT IN ({_FINISHED})
      AND (SELECT count(*) FROM awooop_signal s WHERE s.run_id = :run_id) < :max_signals
    ON CONFLICT (run_id, signal_id) DO NOTHING
    RETURNING seq
), woken AS (
    UPDATE awooop_run_state r
    SET available_at = now(),
        enqueued_at = now(),
        version = r.version + 1,
        updated_at = now()
    FROM target t
    WHERE r.run_id = t.run_id AND EXISTS (SELECT 1 FROM kept)
      AND t.status = 'PENDING' AND t.saga_status = 'RUNNING'
      AND t.last ->> 'status' = 'WAITING' AND t.last ->> 'signal' = :name
    RETURNING r.run_id
), history AS (
    INSERT INTO awooop_run_event (run_id, kind, from_status, to_status, trigger, trigger_id, detail)
    SELECT run_id, 'signal', 'PENDING', 'PENDING', 'signal', 'seq:' || (SELECT seq FROM kept),
           jsonb_build_object('signal', CAST(:name AS text), 'signal_id', CAST(:signal_id AS text))
    FROM woken
)
SELECT t.status, (SELECT seq FROM kept) AS seq, EXISTS (SELECT 1 FROM woken) AS woken,
       (SELECT count(*) FROM awooop_signal s WHERE s.run_id = :run_id) AS kept_count
FROM target t
"""
)

_EXISTING = text(
    "SELECT name, payload_digest FROM awooop_signal"
    " WHERE run_id = :run_id AND signal_id = :signal_id"
)


@dataclass(frozen=True)
class Delivery:
    """What became of a signal.

    ``outcome``: ``delivered`` (the run waited for it and is claimable now: send its
    message), ``kept`` (kept for a wait step to come), ``duplicate`` (this signal id was
    delivered before, with the same name and payload), ``conflict`` (the id was used for
    another name or payload), ``finished`` (the run is finished: nothing kept), ``full``
    (the run has :data:`MAX_SIGNALS_PER_RUN` signals), ``no_run``."""

    outcome: str
    run_status: str | None = None
    seq: int | None = None


def deliver(
    conn: Connection,
    project_id: str,
    run_id: uuid.UUID,
    name: str,
    signal_id: str,
    payload: dict[str, Any],
    digest: str,
) -> Delivery:
    """Keep the signal (once per ``signal_id``) and wake the run if it waits for ``name``."""
    params = {
        "project_id": project_id,
        "run_id": run_id,
        "name": name,
        "signal_id": signal_id,
        "payload": json.dumps(payload),
        "digest": digest,
        "max_signals": MAX_SIGNALS_PER_RUN,
    }
    row = conn.execute(_DELIVER, params).first()
    if row is None:
        return Delivery("no_run")
    if row.seq is not None:
        return Delivery("delivered" if row.woken else "kept", row.status, row.seq)
    # Not inserted: seen before (perhaps committed after this statement's snapshot was
    # taken, so read it again), or refused.
    existing = conn.execute(_EXISTING, params).first()
    if existing is not None:
        same = (existing.name, existing.payload_digest) == (name, digest)
        return Delivery("duplicate" if same else "conflict", row.status)
    if row.status in states.TERMINAL_STATUSES:
        return Delivery("finished", row.status)
    return Delivery("full", row.status)


_NEXT_FOR_WAIT = text(
    """
SELECT extract(epoch FROM now())::float8 AS now, s.seq, s.signal_id, s.payload
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT seq, signal_id, payload FROM awooop_signal
    WHERE run_id = :run_id AND name = :name AND seq > :after
    ORDER BY seq LIMIT 1
) s ON TRUE
"""
)


@dataclass(frozen=True)
class WaitLookup:
    """The database's clock (epoch seconds) and the first signal a wait would take."""

    now: float
    signal: dict[str, Any] | None


def next_for_wait(conn: Connection, run_id: uuid.UUID, name: str | None, after: int) -> WaitLookup:
    """The first signal named ``name`` with ``seq`` above ``after`` (none for a sleep), and
    the database's clock, which times every wait."""
    row = conn.execute(_NEXT_FOR_WAIT, {"run_id": run_id, "name": name, "after": after}).one()
    signal = (
        None
        if row.seq is None
        else {"seq": row.seq, "signal_id": row.signal_id, "payload": row.payload}
    )
    return WaitLookup(float(row.now), signal)
