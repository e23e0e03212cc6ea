"""Read-only statements for health checks and the gauges ``/metrics`` reads at scrape time.

None of them is on a hot path: ``/readyz`` pings, and a Prometheus scrape counts unfinished
runs by status and the outbox backlog, under a short statement timeout so a slow database cannot
hold a scrape (or a web thread) for long.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store.literals import sql_list

_PING = text("SELECT 1")

# Unfinished runs only, from the partial index ix_awooop_run_state_unfinished: the cost is
# the runs in flight, however many finished runs are kept (finished runs are counted where
# they finish, awooop_runs_finished_total).
RUNS_BY_STATUS = text(
    "SELECT status, count(*) AS n FROM awooop_run_state"
    f" WHERE status IN ({sql_list(states.UNFINISHED_STATUSES)})"
    " GROUP BY status"
)

_SET_TIMEOUT = text("SELECT set_config('statement_timeout', :ms, true)")

# Each count from its partial index (ix_awooop_outbox_due for PENDING, the PARKED range of
# ix_awooop_outbox_done): the cost is the backlog, not the SENT messages kept.
OUTBOX_BACKLOG = text(
    """
SELECT (SELECT count(*) FROM awooop_outbox WHERE status = 'PENDING') AS pending,
       (SELECT count(*) FROM awooop_outbox WHERE status = 'PARKED') AS parked,
       (SELECT COALESCE(extract(epoch FROM now() - min(created_at)), 0)::float8
        FROM awooop_outbox WHERE status = 'PENDING') AS oldest_pending_age
"""
)


# The manual-intervention queue's size, from its partial index (saga_status =
# 'MANUAL_INTERVENTION'): its cost grows with the queue, not with retained runs.
_INTERVENTIONS = text(
    "SELECT count(*) FROM awooop_run_state WHERE saga_status = 'MANUAL_INTERVENTION'"
)

# How long the RUNNING run that has gone longest without progress has held still: since it
# was claimed, recorded a step or changed state (``updated_at``; lease renewals do not touch
# it). Read from the partial index of RUNNING runs (ix_awooop_run_state_running_lease): the
# cost is the runs being driven now.
_OLDEST_RUNNING_PROGRESS = text(
    "SELECT COALESCE(extract(epoch FROM now() - min(updated_at)), 0)::float8"
    " FROM awooop_run_state WHERE status = 'RUNNING'"
)


# Approvals a person can still decide: PENDING approval-step rows of runs that wait
# (WAITING_APPROVAL, from the partial index of unfinished runs), each run's approvals through
# ix_awooop_approval_run. The cost is the runs waiting for a person, not the approvals kept.
# ``soonest``: seconds until the first of them expires (0 once due and not yet expired by the
# timer sweep), NULL when none waits.
_APPROVALS_WAITING = text(
    """
SELECT count(*) AS waiting,
       -- (GREATEST skips a NULL: no approval must stay NULL, not become 0)
       CASE WHEN min(a.expires_at) IS NOT NULL
            THEN GREATEST(0, extract(epoch FROM min(a.expires_at) - now()))::float8
       END AS soonest
FROM awooop_run_state r
JOIN awooop_approval a ON a.run_id = r.run_id
WHERE r.status = 'WAITING_APPROVAL' AND a.status = 'PENDING' AND a.kind = 'approval'
"""
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
    outbox: OutboxBacklog


def snapshot(conn: Connection, timeout_seconds: float) -> Snapshot:
    """Runs by status and the outbox backlog. Call inside a transaction (``db.transaction``):
    the statement timeout is set for that transaction only."""
    conn.execute(_SET_TIMEOUT, {"ms": str(max(1, int(timeout_seconds * 1000)))})
    runs = {row.status: int(row.n) for row in conn.execute(RUNS_BY_STATUS)}
    row = conn.execute(OUTBOX_BACKLOG).one()
    outbox = OutboxBacklog(int(row.pending), int(row.parked), float(row.oldest_pending_age))
    return Snapshot(runs_by_status=runs, outbox=outbox)


def oldest_running_progress_age(conn: Connection) -> float:
    """Seconds since the RUNNING run that has gone longest without progress was claimed,
    recorded a step or changed state (0 when no run is RUNNING). Call inside the transaction
    :func:`snapshot` set its statement timeout in."""
    return max(0.0, float(conn.execute(_OLDEST_RUNNING_PROGRESS).scalar_one()))


def interventions(conn: Connection) -> int:
    """Runs waiting for a person (saga MANUAL_INTERVENTION), all projects. Call inside the
    transaction :func:`snapshot` set its statement timeout in."""
    return int(conn.execute(_INTERVENTIONS).scalar_one())


@dataclass(frozen=True)
class ApprovalsWaiting:
    count: int
    soonest_expiry_seconds: float | None


def approvals_waiting(conn: Connection) -> ApprovalsWaiting:
    """Approvals waiting for a decision, and how soon the first of them expires (None when
    none waits). Call inside the transaction :func:`snapshot` set its statement timeout in."""
    row = conn.execute(_APPROVALS_WAITING).one()
    soonest = None if row.soonest is None else float(row.soonest)
    return ApprovalsWaiting(int(row.waiting), soonest)
