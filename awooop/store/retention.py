"""Retention: deleting finished runs with every row that refers to them, and old outbox rows.

Each statement is one batch, in its own short transaction. Rows are taken with
``FOR UPDATE SKIP LOCKED``, so a batch never waits for a run another transaction holds (an
operator's refused operation, a late tool result) and two sweeps share the work; only a row
of a finished run that another transaction holds without holding the run (a timer the timer
sweep is taking) is waited for, for that short transaction, at most the sweeps' lock
timeout. Admission and claims never touch finished runs: they neither wait for a batch nor
hold one up.

Who refers to a run (every table of ``awooop.models``): ``awooop_run_event``,
``awooop_timer`` and ``awooop_approval`` (foreign keys, ON DELETE CASCADE — deleted here
explicitly, to count them), ``awooop_inbox`` and ``awooop_channel_event_dedupe`` (a run id,
no foreign key), ``awooop_outbox`` (a run id; its rows have their own age, below, and are
never deleted while PENDING).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store.literals import sql_list

# The tables a run batch deletes from, in the order of the counts the statement returns.
RUN_TABLES = (
    "awooop_run_state",
    "awooop_run_event",
    "awooop_timer",
    "awooop_approval",
    "awooop_inbox",
    "awooop_channel_event_dedupe",
)

_TERMINAL = sql_list(states.TERMINAL_STATUSES)

# One batch of finished runs. Per project and terminal status, the oldest runs that finished
# longer ago than the project's retention (its run_retention_days, else the default) and whose
# dedupe window (created_at + the dedupe TTL) has passed: a run is never forgotten while a
# late duplicate of its event could still arrive. Each probe is an ordered range scan of
# ix_awooop_run_state_project_status (project_id, status, created_at); created_at bounds it
# (a run finishes after it is created), finished_at decides (updated_at for a row finished by
# hand without one). At most :batch_size runs in all.
#
# A run's dedupe row is found by its key (the event id every admitted run keeps in its input)
# through the unique index, and deleted only if it still names this run. Dedupe rows recorded
# for decisions (they name the run decided, under another key) are left to the dedupe prune:
# they are only ever tested for existence.
_DELETE_RUNS = text(
    f"""
WITH doomed AS MATERIALIZED (
    SELECT r.run_id, r.project_id, r.channel_type, r.event_key
    FROM awooop_project p
    CROSS JOIN LATERAL (
        SELECT now() - COALESCE(p.run_retention_days,
                                CAST(:default_days AS double precision)) * interval '1 day'
               AS finished_before
    ) k
    CROSS JOIN unnest(ARRAY[{_TERMINAL}]) AS s(status)
    CROSS JOIN LATERAL (
        SELECT x.run_id, x.project_id, x.channel_type,
               x.input ->> 'provider_event_id' AS event_key
        FROM awooop_run_state x
        WHERE x.project_id = p.project_id
          AND x.status = s.status
          AND x.created_at < least(k.finished_before,
                                   now() - make_interval(secs => :dedupe_ttl_seconds))
          AND COALESCE(x.finished_at, x.updated_at) < k.finished_before
        ORDER BY x.created_at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    ) r
    LIMIT :batch_size
), events AS (
    DELETE FROM awooop_run_event e USING doomed d WHERE e.run_id = d.run_id RETURNING 1
), timers AS (
    DELETE FROM awooop_timer t USING doomed d WHERE t.run_id = d.run_id RETURNING 1
), approvals AS (
    DELETE FROM awooop_approval a USING doomed d WHERE a.run_id = d.run_id RETURNING 1
), inbox AS (
    DELETE FROM awooop_inbox i USING doomed d WHERE i.run_id = d.run_id RETURNING 1
), dedupe AS (
    DELETE FROM awooop_channel_event_dedupe x USING doomed d
    WHERE x.project_id = d.project_id AND x.channel_type = d.channel_type
      AND x.provider_event_id = d.event_key AND x.run_id = d.run_id
    RETURNING 1
), runs AS (
    DELETE FROM awooop_run_state r USING doomed d WHERE r.run_id = d.run_id RETURNING 1
)
SELECT (SELECT count(*) FROM runs) AS awooop_run_state,
       (SELECT count(*) FROM events) AS awooop_run_event,
       (SELECT count(*) FROM timers) AS awooop_timer,
       (SELECT count(*) FROM approvals) AS awooop_approval,
       (SELECT count(*) FROM inbox) AS awooop_inbox,
       (SELECT count(*) FROM dedupe) AS awooop_channel_event_dedupe
"""
)


@dataclass(frozen=True)
class Deleted:
    """Rows one batch deleted, by table."""

    rows: dict[str, int]

    @property
    def runs(self) -> int:
        return self.rows.get("awooop_run_state", 0)


def delete_finished_runs(
    conn: Connection, default_days: float, dedupe_ttl_seconds: float, batch_size: int
) -> Deleted:
    """Delete up to ``batch_size`` finished runs past their retention, with their events,
    timers, approvals, inbox and dedupe rows. Call with an autocommit connection (the
    statement is its own transaction) or inside a short transaction of the caller's."""
    row = conn.execute(
        _DELETE_RUNS,
        {
            "default_days": default_days,
            "dedupe_ttl_seconds": dedupe_ttl_seconds,
            "batch_size": batch_size,
        },
    ).one()
    return Deleted({table: int(getattr(row, table)) for table in RUN_TABLES})


# Messages done with (SENT, or PARKED after their retries): per status, the oldest first
# through ix_awooop_outbox_done (status, created_at). A PARKED message an operator re-queues
# meanwhile is PENDING again when its lock is granted: re-checked, and kept. PENDING messages
# are never deleted.
_DELETE_OUTBOX = text(
    """
DELETE FROM awooop_outbox
WHERE message_id IN (
    SELECT o.message_id
    FROM unnest(ARRAY['SENT', 'PARKED']) AS s(status)
    CROSS JOIN LATERAL (
        SELECT message_id
        FROM awooop_outbox
        WHERE status = s.status
          AND status IN ('SENT', 'PARKED')  -- lets the planner use the partial index
          AND created_at < now() - CAST(:days AS double precision) * interval '1 day'
        ORDER BY created_at
        LIMIT :batch_size
        FOR UPDATE SKIP LOCKED
    ) o
    LIMIT :batch_size
)
"""
)


def delete_old_outbox(conn: Connection, days: float, batch_size: int) -> int:
    """Delete up to ``batch_size`` SENT or PARKED outbox messages created more than ``days``
    days ago; returns how many."""
    return conn.execute(_DELETE_OUTBOX, {"days": days, "batch_size": batch_size}).rowcount
