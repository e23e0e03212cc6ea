"""The schedule sweep against a real PostgreSQL: one run per tick and project, however many
sweeps, and the missed-tick policy."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text

from awooop.engine import schedules
from tests.support import db
from tests.support.waiting import lock_waiters, until
from tests.support.workflows import EVERY_MINUTE

NOW = datetime(2026, 12, 2, 9, 0, 20, tzinfo=UTC)
TICK_KEY = "test-every-minute@2026-12-02T09:00:00Z"


def sweep(engine, settings, now=NOW):
    return schedules.schedule_once(engine, settings, now=now, workflows=lambda: [EVERY_MINUTE])


def scheduled_runs(engine: Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT r.run_id, r.project_id, r.channel_type, r.workflow_name, r.input,"
                " d.provider_event_id FROM awooop_run_state r"
                " JOIN awooop_channel_event_dedupe d ON d.run_id = r.run_id"
                " ORDER BY d.provider_event_id"
            )
        ).mappings()
        return [dict(r) for r in rows]


@pytest.fixture(autouse=True)
def fresh_log_memory(monkeypatch):
    """Each test is a new process as far as "logged once" goes."""
    monkeypatch.setattr(schedules, "_logged", schedules._Once())


def test_a_pass_starts_the_due_tick_in_a_project_that_allows_the_workflow(
    engine, project, settings
):
    db.allow_workflows(engine, project["project_id"], "test-every-minute")

    swept = sweep(engine, settings)

    [run] = scheduled_runs(engine)
    assert swept.admitted == [run["run_id"]]
    assert (run["project_id"], run["channel_type"], run["provider_event_id"]) == (
        project["project_id"],
        "schedule",
        TICK_KEY,
    )
    assert run["input"] == {
        "channel": "schedule",
        "provider_event_id": TICK_KEY,
        "event": {
            "workflow": "test-every-minute",
            "schedule": "* * * * *",
            "tick": "2026-12-02T09:00:00Z",
        },
        "meta": {},
        "project": {},
    }


def test_a_second_pass_in_the_same_tick_starts_nothing(engine, project, settings):
    db.allow_workflows(engine, project["project_id"], "test-every-minute")
    sweep(engine, settings)

    again = sweep(engine, settings, now=NOW.replace(second=55))

    assert again.admitted == []
    assert len(scheduled_runs(engine)) == 1


def test_the_next_tick_starts_a_second_run(engine, project, settings):
    db.allow_workflows(engine, project["project_id"], "test-every-minute")
    sweep(engine, settings)

    sweep(engine, settings, now=NOW.replace(minute=1))

    assert [r["provider_event_id"] for r in scheduled_runs(engine)] == [
        TICK_KEY,
        "test-every-minute@2026-12-02T09:01:00Z",
    ]


def test_a_project_that_does_not_allow_the_workflow_gets_nothing(engine, project, settings):
    db.allow_workflows(engine, project["project_id"], "some-other-workflow")

    swept = sweep(engine, settings)

    assert swept.admitted == [] and swept.late == []
    assert db.count(engine, "awooop_run_state") == 0


@pytest.mark.parametrize("quota", [None, 10], ids=["no-quota", "within-quota"])
def test_two_sweeps_held_at_the_same_tick_start_exactly_one_run(engine, project, settings, quota):
    # Given two sweeps that have both read that the tick is not started yet, and are both
    # held inside the admission statement (a lock on the run table: no run can be inserted)
    db.allow_workflows(engine, project["project_id"], "test-every-minute", max_active_runs=quota)
    results: list[schedules.Swept] = []
    errors: list[BaseException] = []

    def one_sweep():
        try:
            results.append(sweep(engine, settings))
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    gate = engine.connect().execution_options(isolation_level="READ COMMITTED")
    gate_tx = gate.begin()
    gate.execute(text("LOCK TABLE awooop_run_state IN SHARE MODE"))
    threads = [threading.Thread(target=one_sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    until(lambda: lock_waiters(engine) == 2, what="both sweeps waiting in admission")

    # When the gate opens
    gate_tx.rollback()
    gate.close()
    for thread in threads:
        thread.join(timeout=30)

    # Then one run started, and only one of the sweeps says it started it
    assert errors == []
    assert sorted(len(r.admitted) for r in results) == [0, 1]
    assert [r["provider_event_id"] for r in scheduled_runs(engine)] == [TICK_KEY]


def test_after_an_outage_only_the_latest_tick_runs_and_the_skipped_ones_are_logged(
    engine, project, settings, caplog
):
    # Given the 09:00 tick started, then no sweep for ten minutes
    db.allow_workflows(engine, project["project_id"], "test-every-minute")
    sweep(engine, settings)
    caplog.set_level(logging.INFO, logger="awooop.engine.schedules")

    # When a sweep runs at 09:10:05
    swept = sweep(engine, settings, now=NOW.replace(minute=10, second=5))

    # Then the 09:10 tick started, and 09:01 to 09:09 were skipped (one log line)
    assert len(swept.admitted) == 1
    assert [r["provider_event_id"] for r in scheduled_runs(engine)] == [
        TICK_KEY,
        "test-every-minute@2026-12-02T09:10:00Z",
    ]
    [skipped] = [r for r in caplog.records if r.action == "schedule_ticks_skipped"]
    assert (skipped.reason, skipped.first_skipped, skipped.last_skipped, skipped.skipped) == (
        "missed",
        "2026-12-02T09:01:00Z",
        "2026-12-02T09:09:00Z",
        9,
    )


def test_a_tick_found_too_late_is_skipped_and_logged_once(engine, project, settings, caplog):
    # Given a deployment whose first sweep comes long after the tick (beyond the bound)
    db.allow_workflows(engine, project["project_id"], "test-every-minute")
    caplog.set_level(logging.INFO, logger="awooop.engine.schedules")
    tight = settings.__class__(**{**settings.__dict__, "schedule_max_lateness_seconds": 10.0})

    first = sweep(engine, tight, now=NOW)  # 20 s after the 09:00 tick
    second = sweep(engine, tight, now=NOW.replace(second=40))

    assert first.late == second.late == [(project["project_id"], TICK_KEY)]
    assert db.count(engine, "awooop_run_state") == 0
    late = [r for r in caplog.records if getattr(r, "action", "") == "schedule_ticks_skipped"]
    assert [(r.reason, r.tick) for r in late] == [("late", "2026-12-02T09:00:00Z")]


def test_a_daily_job_does_not_fire_on_the_first_start_hours_after_its_time(
    engine, project, settings
):
    from awooop.domain.workflow import Step, Workflow

    daily = Workflow("test-daily", 1, [Step("a", lambda ctx: None)], schedule="0 0 * * *")
    db.allow_workflows(engine, project["project_id"], "test-daily")

    swept = schedules.schedule_once(engine, settings, now=NOW, workflows=lambda: [daily])

    assert swept.admitted == []
    assert swept.late == [(project["project_id"], "test-daily@2026-12-02T00:00:00Z")]


def test_a_tick_refused_by_the_quota_is_logged_once_and_not_retried_once_late(
    engine, project, settings, caplog
):
    db.allow_workflows(engine, project["project_id"], "test-every-minute", max_active_runs=0)
    caplog.set_level(logging.INFO, logger="awooop.engine.schedules")

    refused = sweep(engine, settings)
    again = sweep(engine, settings, now=NOW.replace(second=50))
    # 09:00 is now beyond the bound of 300 s: skipped, no longer tried
    much_later = sweep(engine, settings, now=NOW.replace(minute=5, second=30))

    assert refused.over_quota == again.over_quota == [(project["project_id"], TICK_KEY)]
    assert much_later.over_quota == [
        (project["project_id"], "test-every-minute@2026-12-02T09:05:00Z")
    ]
    assert db.count(engine, "awooop_run_state") == 0
    over = [r for r in caplog.records if getattr(r, "action", "") == "schedule_tick_over_quota"]
    assert [r.tick for r in over] == ["2026-12-02T09:00:00Z", "2026-12-02T09:05:00Z"]


def test_only_the_latest_version_of_a_workflow_is_scheduled(monkeypatch):
    from awooop.domain.workflow import Step, Workflow
    from awooop.workflows import registry

    steps = [Step("a", lambda ctx: None)]
    old = Workflow("test-versions", 1, steps, schedule="* * * * *")
    new = Workflow("test-versions", 2, steps)
    monkeypatch.setattr(registry, "all_workflows", lambda: [old, new, EVERY_MINUTE])

    assert schedules.scheduled_workflows() == [EVERY_MINUTE]


def test_schedule_is_no_webhook_channel(client, project):
    response = client.post(
        f"/v1/projects/{project['project_id']}/webhooks/schedule",
        json={"workflow": "test-every-minute"},
        headers={"Authorization": f"Bearer {project['api_token']}"},
    )

    assert response.status_code == 404


def test_the_runs_api_lists_scheduled_runs_by_channel(client, engine, project, settings):
    db.allow_workflows(engine, project["project_id"], "test-every-minute")
    [run_id] = sweep(engine, settings).admitted
    auth = {"Authorization": f"Bearer {project['api_token']}"}

    scheduled = client.get(
        f"/v1/projects/{project['project_id']}/runs?channel=schedule", headers=auth
    )
    from_api = client.get(f"/v1/projects/{project['project_id']}/runs?channel=api", headers=auth)

    assert scheduled.status_code == 200, scheduled.get_json()
    assert [r["run_id"] for r in scheduled.get_json()["runs"]] == [str(run_id)]
    assert from_api.get_json()["runs"] == []
