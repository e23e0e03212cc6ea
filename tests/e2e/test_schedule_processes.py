"""Scheduled workflows end to end: a real beat, two maintenance workers sweeping, a runs
worker executing what they admit."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from awooop import cli
from tests.support import db
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow


def _new_allowing_project(engine, settings) -> str:
    project_id = cli.create_project(settings, f"p{uuid.uuid4().hex[:8]}")["project_id"]
    db.allow_workflows(engine, project_id, "test-every-minute")
    return project_id


def _completed(engine, project_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT count(*) FROM awooop_run_state WHERE project_id = :p"
                " AND channel_type = 'schedule' AND status = 'COMPLETED'"
            ),
            {"p": project_id},
        ).scalar_one()


def _runs_per_tick(engine) -> dict[tuple[str, str], int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT project_id, input->'event'->>'tick' AS tick, count(*) AS n"
                " FROM awooop_run_state WHERE channel_type = 'schedule' GROUP BY 1, 2"
            )
        ).all()
    return {(row.project_id, row.tick): row.n for row in rows}


def test_beat_starts_each_tick_once_per_project_and_a_worker_completes_it(
    stack, engine, project, settings
):
    # Given a project that allows the minutely test workflow, and a beat sending the schedule
    # sweep every 0.2 s to two maintenance workers
    db.allow_workflows(engine, project["project_id"], "test-every-minute")
    stack.env["AWOOOP_SCHEDULE_INTERVAL_SECONDS"] = "0.2"
    stack.worker()
    stack.worker("maintenance-1", queues="maintenance")
    stack.worker("maintenance-2", queues="maintenance")
    beat = stack.beat()

    # When the due tick is started and its run completes
    wait_until(lambda: _completed(engine, project["project_id"]) >= 1, 30, "a scheduled run")
    # ...sweeps go on (a project allowed afterwards gets its run)...
    later = _new_allowing_project(engine, settings)
    wait_until(lambda: _completed(engine, later) >= 1, 30, "the later project's run")
    # ...and a restarted beat sweeps again
    beat.stop()
    stack.beat()
    after_restart = _new_allowing_project(engine, settings)
    wait_until(lambda: _completed(engine, after_restart) >= 1, 30, "a run after the restart")

    # Then no project started a tick twice
    per_tick = _runs_per_tick(engine)
    assert {p for p, _ in per_tick} == {project["project_id"], later, after_restart}
    assert set(per_tick.values()) == {1}, per_tick
