"""Read-only statements for the console's overview of one project.

Each statement is bounded, whatever the number of runs a project has kept:

- runs by status **now** counts only the unfinished statuses, each up to a cap, by index
  range (``ix_awooop_run_state_project_status``); finished runs are counted in the window;
- runs **finished** per minute read only the window's rows
  (``ix_awooop_run_state_project_finished``: project, finished_at);
- the intervention queue counts up to a cap by its partial index and takes its first row;
- the outbox backlog counts unsent messages up to a cap by their partial index
  (``ix_awooop_outbox_project_unsent``).

Times are the database's: the window ends at ``now()``. Times come back in UTC, whatever
the session's time zone (the console shows and filters in UTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, text

from awooop.domain import states
from awooop.store.literals import sql_list

ACTIVE_STATUSES = states.UNFINISHED_STATUSES


def _capped_counts(table: str, statuses: tuple[str, ...]) -> str:
    """One capped index range per status: LIMIT bounds each count, so a backlog of a
    million rows costs as much as :cap of them. Each status is a literal (from our own
    constants), so the planner estimates each range from the column's statistics; a status
    bound from a row source would be estimated blind, and read through a sequential scan."""
    return "\nUNION ALL\n".join(
        f"""SELECT {literal} AS status, (SELECT count(*) FROM (
    SELECT 1 FROM {table} WHERE project_id = :project_id AND status = {literal} LIMIT :cap
) capped) AS n"""
        for literal in (sql_list([status]) for status in statuses)
    )


_ACTIVE = text(_capped_counts("awooop_run_state", ACTIVE_STATUSES))

# The window is whole minutes: from the start of the minute (minutes - 1) before now's
# minute, to now.
_FINISHED = text(
    """
WITH w AS (
    SELECT now() AS now,
           date_trunc('minute', now()) - make_interval(mins => :minutes - 1) AS start
)
SELECT w.now, w.start, f.minute, f.status, f.failure_code, f.n
FROM w
LEFT JOIN LATERAL (
    SELECT date_trunc('minute', r.finished_at) AS minute, r.status, r.failure_code,
           count(*) AS n
    FROM awooop_run_state r
    WHERE r.project_id = :project_id AND r.finished_at >= w.start
      AND r.finished_at IS NOT NULL
    GROUP BY 1, 2, 3
) f ON TRUE
ORDER BY f.minute, f.status, f.failure_code
"""
)

_INTERVENTIONS = text(
    """
SELECT count(*) AS n FROM (
    SELECT 1 FROM awooop_run_state
    WHERE project_id = :project_id AND saga_status = 'MANUAL_INTERVENTION'
    LIMIT :cap
) capped
"""
)

# The head of the queue as the console lists it (oldest run first), and how long it waits.
_OLDEST_INTERVENTION = text(
    """
SELECT run_id, workflow_name, workflow_version, current_step, direction, failure_code,
       failure_reason, created_at, updated_at, now() - updated_at AS waiting
FROM awooop_run_state
WHERE project_id = :project_id AND saga_status = 'MANUAL_INTERVENTION'
ORDER BY created_at, run_id
LIMIT 1
"""
)

BACKLOG_STATUSES = ("PENDING", "PARKED")
_OUTBOX_COUNTS = text(_capped_counts("awooop_outbox", BACKLOG_STATUSES))
_OUTBOX_OLDEST = text(
    """
SELECT now() AS now,
       (SELECT min(created_at) FROM awooop_outbox
        WHERE project_id = :project_id AND status = 'PENDING') AS pending,
       (SELECT min(created_at) FROM awooop_outbox
        WHERE project_id = :project_id AND status = 'PARKED') AS parked
"""
)


@dataclass(frozen=True)
class Finished:
    """Runs that finished in one minute with one status and failure code."""

    minute: datetime
    status: str
    failure_code: str | None
    count: int


@dataclass(frozen=True)
class FinishedWindow:
    start: datetime  # the first minute's start (UTC, as every time here)
    now: datetime
    minutes: int
    rows: list[Finished]


@dataclass(frozen=True)
class Interventions:
    count: int  # up to the cap
    oldest: dict[str, Any] | None  # the head of the queue, with ``waiting`` (a timedelta)


@dataclass(frozen=True)
class Backlog:
    status: str  # PENDING or PARKED
    count: int  # up to the cap
    oldest: datetime | None
    now: datetime


_ALL = text(_capped_counts("awooop_run_state", states.RUN_STATUSES))


def status_counts(conn: Connection, project_id: str, cap: int) -> dict[str, int]:
    """The project's runs by status, every status, each counted up to ``cap``."""
    params = {"project_id": project_id, "cap": cap}
    return {r.status: int(r.n) for r in conn.execute(_ALL, params)}


def active_counts(conn: Connection, project_id: str, cap: int) -> dict[str, int]:
    """The project's unfinished runs by status, each counted up to ``cap``."""
    params = {"project_id": project_id, "cap": cap}
    return {r.status: int(r.n) for r in conn.execute(_ACTIVE, params)}


def finished(conn: Connection, project_id: str, minutes: int) -> FinishedWindow:
    """Runs finished in the last ``minutes`` whole minutes (the current one included), by
    minute, status and failure code."""
    result = conn.execute(_FINISHED, {"project_id": project_id, "minutes": minutes}).all()
    rows = [
        Finished(r.minute.astimezone(UTC), r.status, r.failure_code, int(r.n))
        for r in result
        if r.minute is not None
    ]
    start, now = result[0].start.astimezone(UTC), result[0].now.astimezone(UTC)
    return FinishedWindow(start=start, now=now, minutes=minutes, rows=rows)


def interventions(conn: Connection, project_id: str, cap: int) -> Interventions:
    count = conn.execute(_INTERVENTIONS, {"project_id": project_id, "cap": cap}).scalar_one()
    oldest = conn.execute(_OLDEST_INTERVENTION, {"project_id": project_id}).mappings().first()
    return Interventions(int(count), dict(oldest) if oldest else None)


def outbox_backlog(conn: Connection, project_id: str, cap: int) -> dict[str, Backlog]:
    """The project's PENDING and PARKED messages: counts up to ``cap``, and the oldest."""
    params = {"project_id": project_id, "cap": cap}
    counts = {r.status: int(r.n) for r in conn.execute(_OUTBOX_COUNTS, params)}
    oldest = conn.execute(_OUTBOX_OLDEST, params).one()
    return {
        "PENDING": Backlog("PENDING", counts["PENDING"], oldest.pending, oldest.now),
        "PARKED": Backlog("PARKED", counts["PARKED"], oldest.parked, oldest.now),
    }
