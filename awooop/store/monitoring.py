"""Read-only statements for health checks and the gauges ``/metrics`` reads at scrape time.

None of them is on a hot path: ``/readyz`` pings, and a Prometheus scrape counts runs by
status and the outbox backlog, under a short statement timeout so a slow database cannot
hold a scrape (or a web thread) for long.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

_PING = text("SELECT 1")

# GROUP BY over the whole table: PostgreSQL answers it from the (project_id, status,
# created_at) index when that is cheaper than the heap. Its cost grows with retained runs,
# hence the statement timeout.
_RUNS_BY_STATUS = text("SELECT status, count(*) AS n FROM awooop_run_state GROUP BY status")

_SET_TIMEOUT = text("SELECT set_config('statement_timeout', :ms, true)")

# The outbox table arrives with the approvals/outbox work; until its migration has run the
# backlog is simply not reported (to_regclass is NULL for a missing table, no error).
_OUTBOX_EXISTS = text("SELECT to_regclass('awooop_outbox') IS NOT NULL")
_OUTBOX_BACKLOG = text(
    """
SELECT count(*) FILTER (WHERE status = 'PENDING') AS pending,
       count(*) FILTER (WHERE status = 'PARKED') AS parked,
       COALESCE(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'PENDING')),
                0)::float8 AS oldest_pending_age
FROM awooop_outbox
WHERE status IN ('PENDING', 'PARKED')
"""
)


# The manual-intervention queue's size, from its partial index (saga_status =
# 'MANUAL_INTERVENTION'): its cost grows with the queue, not with retained runs.
_INTERVENTIONS = text(
    "SELECT count(*) FROM awooop_run_state WHERE saga_status = 'MANUAL_INTERVENTION'"
)


def ping(conn: Connection) -> None:
    """One round trip; raises when the database does not answer."""
    conn.execute(_PING).scalar_one()


@dataclass(frozen=True)
class OutboxBacklog:
    pending: int
    parked: int
    oldest_pending_age_seconds: float


@dataclass(frozen=True)
class Snapshot:
    runs_by_status: dict[str, int]
    # None while the awooop_outbox table does not exist in this database.
    outbox: OutboxBacklog | None


def snapshot(conn: Connection, timeout_seconds: float) -> Snapshot:
    """Runs by status and the outbox backlog. Call inside a transaction (``db.transaction``):
    the statement timeout is set for that transaction only."""
    conn.execute(_SET_TIMEOUT, {"ms": str(max(1, int(timeout_seconds * 1000)))})
    runs = {row.status: int(row.n) for row in conn.execute(_RUNS_BY_STATUS)}
    outbox = None
    if conn.execute(_OUTBOX_EXISTS).scalar_one():
        row = conn.execute(_OUTBOX_BACKLOG).one()
        outbox = OutboxBacklog(int(row.pending), int(row.parked), float(row.oldest_pending_age))
    return Snapshot(runs_by_status=runs, outbox=outbox)


def interventions(conn: Connection) -> int:
    """Runs waiting for a person (saga MANUAL_INTERVENTION), all projects. Call inside the
    transaction :func:`snapshot` set its statement timeout in."""
    return int(conn.execute(_INTERVENTIONS).scalar_one())
