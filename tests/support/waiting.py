"""Waiting for a condition (never for a fixed time), and firing timers that must exist."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine, text

from awooop.config import Settings
from awooop.engine import sweeps
from awooop.store import timers

T = TypeVar("T")


def until(
    condition: Callable[[], T], timeout: float = 10.0, what: str = "condition", poll: float = 0.01
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def _timer_due(engine: Engine, run_id: object, kind: str) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM awooop_timer WHERE run_id = :r AND kind = :k"
                    " AND state = 'PENDING' AND due_at <= now())"
                ),
                {"r": run_id, "k": kind},
            ).scalar_one()
        )


def fire_when_due(
    engine: Engine, settings: Settings, run_id: object, kind: str, timeout: float = 10.0
) -> list[timers.FiredTimer]:
    """Wait until the run has a pending ``kind`` timer that is due, run the timer sweep, and
    check that it fired that timer: a run whose wake-up timer is missing fails here instead
    of being woken by the test."""
    deadline = time.monotonic() + timeout
    swept: list[timers.FiredTimer] = []
    while time.monotonic() < deadline:
        until(lambda: _timer_due(engine, run_id, kind), timeout, f"a due {kind} timer of {run_id}")
        # A stale timer of the same kind may fall due first (skipped): sweep until ours fires.
        fired = sweeps.fire_due_timers_once(engine, settings)
        swept += fired
        if any(t.run_id == run_id and t.kind == kind for t in fired):
            return fired
    raise AssertionError(f"no {kind} timer of {run_id} fired; the sweeps fired {swept}")


def lock_waiters(engine: Engine) -> int:
    """How many sessions of the test's database wait for a lock another one holds."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def blocked_on_lock(engine: Engine, needle: str) -> bool:
    """Whether some backend running a statement containing ``needle`` waits for a lock."""
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE :q AND pid <> pg_backend_pid())"
                ),
                {"q": f"%{needle}%"},
            ).scalar_one()
        )
