"""The retention sweep against a real PostgreSQL: what it deletes, what it keeps, in batches
that never wait for a run another transaction holds."""

from __future__ import annotations

import itertools
import json
import threading
import uuid

import pytest
from sqlalchemy import Engine, text

from awooop import db as awooop_db
from awooop.config import Settings
from awooop.engine import runner, sweeps
from awooop.store import retention
from tests.support import db
from tests.support import metrics as test_metrics
from tests.support import runs as test_runs

DAY = 86400.0
# Every table that refers to a run, and the column it does so with.
RUN_ROWS = {
    "awooop_run_state": "run_id",
    "awooop_run_event": "run_id",
    "awooop_timer": "run_id",
    "awooop_approval": "run_id",
    "awooop_inbox": "run_id",
    "awooop_channel_event_dedupe": "run_id",
    "awooop_outbox": "run_id",
}


def settings_with(settings: Settings, **changes: object) -> Settings:
    return settings.__class__(**{**settings.__dict__, **changes})


@pytest.fixture
def tuned(settings: Settings) -> Settings:
    """The defaults (30 days, 7-day dedupe TTL), one small batch size."""
    return settings_with(settings, retention_batch_size=50)


def with_dependents(engine: Engine, project_id: str, run_id: uuid.UUID) -> None:
    """A row in every other table that refers to the run: a timer, an approval, an inbox
    entry and a sent outbox message (besides its dedupe row and history)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version)"
                " VALUES (:t, :r, 'deadline', now() + interval '90 days', -1)"
            ),
            {"t": f"{run_id}/test-deadline", "r": run_id},
        )
        conn.execute(
            text(
                "INSERT INTO awooop_approval (token_hash, project_id, run_id, step, action, status)"
                " VALUES (:h, :p, :r, 'approve', 'restart', 'SUPERSEDED')"
            ),
            {"h": uuid.uuid4().hex + uuid.uuid4().hex, "p": project_id, "r": run_id},
        )
        conn.execute(
            text(
                "INSERT INTO awooop_inbox (consumer, event_id, run_id, request_digest)"
                " VALUES ('tool-result', :e, :r, 'd')"
            ),
            {"e": uuid.uuid4().hex, "r": run_id},
        )
        conn.execute(
            text(
                "INSERT INTO awooop_outbox (project_id, run_id, channel, purpose, payload, status)"
                " VALUES (:p, :r, 'webhook', 'run_outcome', '{}', 'SENT')"
            ),
            {"p": project_id, "r": run_id},
        )


def age(
    engine: Engine, run_id: uuid.UUID, *, created_days: float, finished_days: float | None
) -> None:
    """Move the run (and its dedupe row, admitted with it) into the past."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET created_at = now() - :c * interval '1 day',"
                " finished_at = now() - :f * interval '1 day' WHERE run_id = :r"
            ),
            {"c": created_days, "f": finished_days, "r": run_id},
        )
        conn.execute(
            text(
                "UPDATE awooop_channel_event_dedupe SET created_at = now() - :c * interval '1 day'"
                " WHERE run_id = :r"
            ),
            {"c": created_days, "r": run_id},
        )


def finished_run(
    engine: Engine,
    settings: Settings,
    project_id: str,
    *,
    created_days: float,
    finished_days: float,
    dependents: bool = False,
) -> uuid.UUID:
    """A noop-3 run driven to COMPLETED by a worker, then moved into the past."""
    run_id = test_runs.admit(engine, project_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    if dependents:
        with_dependents(engine, project_id, run_id)
    age(engine, run_id, created_days=created_days, finished_days=finished_days)
    return run_id


def failed_run(
    engine: Engine, project_id: str, *, created_days: float, finished_days: float
) -> uuid.UUID:
    """A run claimed and failed (RUNNING -> FAILED, as the reaper fails one whose attempts ran
    out), in the past."""
    run_id = test_runs.admit(engine, project_id)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET status = 'RUNNING' WHERE run_id = :r"), {"r": run_id}
        )
        conn.execute(
            text("UPDATE awooop_run_state SET status = 'FAILED' WHERE run_id = :r"), {"r": run_id}
        )
    age(engine, run_id, created_days=created_days, finished_days=finished_days)
    return run_id


def rows_of(engine: Engine, run_id: uuid.UUID) -> dict[str, int]:
    return {
        table: db.count(engine, table, f"{column} = :r", r=run_id)
        for table, column in RUN_ROWS.items()
    }


def deleted_counter(table: str) -> float:
    return test_metrics.local("awooop_retention_deleted_rows_total", table=table)


def test_old_finished_runs_go_with_every_row_that_refers_to_them(engine, project, tuned):
    # Given a run that finished 31 days ago, with a row in every table that refers to it
    old = finished_run(
        engine, tuned, project["project_id"], created_days=31, finished_days=31, dependents=True
    )
    old_rows = rows_of(engine, old)
    assert all(n >= 1 for n in old_rows.values()), old_rows
    before = {table: deleted_counter(table) for table in RUN_ROWS}

    # When the sweep runs
    deleted = sweeps.retention_once(engine, tuned)

    # Then every row of it is gone — but its sent message, which has its own age
    assert rows_of(engine, old) == {**{t: 0 for t in RUN_ROWS}, "awooop_outbox": 1}
    expected = {t: n for t, n in old_rows.items() if t != "awooop_outbox"}
    assert deleted == expected
    after = {table: deleted_counter(table) for table in RUN_ROWS}
    assert {t: after[t] - before[t] for t in RUN_ROWS} == {**expected, "awooop_outbox": 0}


def test_young_finished_runs_and_old_unfinished_runs_are_kept(engine, project, tuned):
    project_id = project["project_id"]
    # Finished 29 days ago (created 40 days ago): not yet past the 30 days.
    young = finished_run(
        engine, tuned, project_id, created_days=40, finished_days=29, dependents=True
    )
    # Created 60 days ago and still unfinished: waiting for an approval, and pending.
    waiting = test_runs.admit(engine, project_id, "test-approval")
    assert runner.execute(engine, tuned, waiting) == runner.Outcome.WAITING_APPROVAL
    pending = test_runs.admit(engine, project_id)
    for run_id in (waiting, pending):
        with_dependents(engine, project_id, run_id)
        age(engine, run_id, created_days=60, finished_days=None)
    kept = {run_id: rows_of(engine, run_id) for run_id in (young, waiting, pending)}

    assert sweeps.retention_once(engine, tuned) == {}

    assert {run_id: rows_of(engine, run_id) for run_id in kept} == kept


def test_a_run_is_kept_until_its_dedupe_row_has_expired(engine, project, tuned, client):
    # Given a project that keeps finished runs 1 day, and a run of an event 3 days old
    project_id = project["project_id"]
    with engine.begin() as conn:
        conn.execute(text("UPDATE awooop_project SET run_retention_days = 1"))
    path = f"/v1/projects/{project_id}/runs"
    headers = {"Authorization": f"Bearer {project['api_token']}", "Idempotency-Key": "evt-1"}
    first = client.post(path, headers=headers, json={"summary": "disk"})
    run_id = uuid.UUID(first.get_json()["run_id"])
    assert runner.execute(engine, tuned, run_id) == runner.Outcome.COMPLETED
    age(engine, run_id, created_days=3, finished_days=3)

    # When the sweep runs (the dedupe TTL is 7 days)
    assert sweeps.retention_once(engine, tuned) == {}

    # Then a late duplicate of the event still finds its run
    again = client.post(path, headers=headers, json={"summary": "disk"})
    assert again.status_code == 200
    assert again.get_json()["run_id"] == str(run_id)

    # And once the dedupe row would have expired, run and dedupe row go together
    age(engine, run_id, created_days=8, finished_days=3)
    assert sweeps.retention_once(engine, tuned)["awooop_channel_event_dedupe"] == 1
    assert rows_of(engine, run_id)["awooop_run_state"] == 0
    # A redelivery after that is a new event (the dedupe TTL is the promise)
    assert client.post(path, headers=headers, json={"summary": "disk"}).status_code == 202


def test_a_project_retention_overrides_the_default_both_ways(engine, settings, tuned):
    from awooop import cli

    short, long_, default = (
        cli.create_project(settings, name)["project_id"] for name in ("short", "long", "dflt")
    )
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE awooop_project SET run_retention_days = 10 WHERE project_id = 'short'")
        )
        conn.execute(
            text("UPDATE awooop_project SET run_retention_days = 90 WHERE project_id = 'long'")
        )
    runs = {
        (p, days): finished_run(engine, tuned, p, created_days=days + 1, finished_days=days)
        for p in (short, long_, default)
        for days in (20, 60)
    }

    sweeps.retention_once(engine, tuned)

    remaining = {
        key
        for key, run_id in runs.items()
        if db.count(engine, "awooop_run_state", "run_id = :r", r=run_id)
    }
    # short (10 days): both gone; default (30): the 60-day one gone; long (90): both kept
    assert remaining == {("dflt", 20), ("long", 20), ("long", 60)}


def test_each_batch_deletes_at_most_its_size(engine, project, tuned):
    project_id = project["project_id"]
    for _ in range(5):
        failed_run(engine, project_id, created_days=40, finished_days=40)
    young = failed_run(engine, project_id, created_days=40, finished_days=1)

    def batch() -> int:
        with engine.connect() as conn:
            return retention.delete_finished_runs(conn, 30, 7 * DAY, 2).runs

    assert [batch() for _ in range(4)] == [2, 2, 1, 0]
    assert db.count(engine, "awooop_run_state") == 1
    assert rows_of(engine, young)["awooop_run_state"] == 1


def test_a_pass_takes_several_batches_and_stops_when_its_time_is_up(engine, project, settings):
    project_id = project["project_id"]
    for _ in range(5):
        failed_run(engine, project_id, created_days=40, finished_days=40)
    small = settings_with(settings, retention_batch_size=2, sweep_pass_seconds=10.0)

    # A clock that has run out after the first round of batches
    out_of_time = itertools.chain([0.0], itertools.repeat(100.0))
    first = sweeps.retention_once(engine, small, clock=lambda: next(out_of_time))
    assert first["awooop_run_state"] == 2
    assert db.count(engine, "awooop_run_state") == 3

    # The next pass, with time enough, goes on batch after batch until none is left
    assert sweeps.retention_once(engine, small)["awooop_run_state"] == 3
    assert db.count(engine, "awooop_run_state") == 0


def test_the_sweep_skips_a_run_another_transaction_holds_and_does_not_wait(engine, project, tuned):
    project_id = project["project_id"]
    held = failed_run(engine, project_id, created_days=40, finished_days=40)
    free = failed_run(engine, project_id, created_days=40, finished_days=40)
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with awooop_db.transaction(engine) as conn:
            conn.execute(
                text("SELECT 1 FROM awooop_run_state WHERE run_id = :r FOR UPDATE"), {"r": held}
            )
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        # The sweep runs in a thread of its own: were it to wait for the lock, it would
        # still be waiting when we look (the lock is only released after we looked).
        result: list[dict[str, int]] = []
        sweeper = threading.Thread(
            target=lambda: result.append(sweeps.retention_once(engine, tuned))
        )
        sweeper.start()
        sweeper.join(10)
        assert not sweeper.is_alive(), "the sweep waited for a run another transaction holds"
        assert result[0]["awooop_run_state"] == 1
        assert rows_of(engine, free)["awooop_run_state"] == 0
        assert rows_of(engine, held)["awooop_run_state"] == 1
    finally:
        release.set()
        holder.join(10)

    # Released, the next pass takes it
    assert sweeps.retention_once(engine, tuned)["awooop_run_state"] == 1


def test_sent_and_parked_messages_past_their_age_are_deleted_pending_ones_never(
    engine, project, tuned
):
    project_id = project["project_id"]
    with engine.begin() as conn:
        for status, days in (
            ("SENT", 31),
            ("PARKED", 31),
            ("PENDING", 31),
            ("SENT", 29),
            ("PARKED", 29),
        ):
            conn.execute(
                text(
                    "INSERT INTO awooop_outbox (project_id, channel, purpose, payload, status,"
                    " created_at) VALUES (:p, 'webhook', 'run_outcome', CAST(:payload AS jsonb),"
                    " :s, now() - :d * interval '1 day')"
                ),
                {"p": project_id, "s": status, "d": days, "payload": json.dumps({"d": days})},
            )
    before = deleted_counter("awooop_outbox")

    deleted = sweeps.retention_once(engine, settings_with(tuned, outbox_retention_days=30))

    assert deleted == {"awooop_outbox": 2}
    left = db.rows(engine, "SELECT status, payload ->> 'd' AS d FROM awooop_outbox ORDER BY 1, 2")
    assert [(r["status"], r["d"]) for r in left] == [
        ("PARKED", "29"),
        ("PENDING", "31"),
        ("SENT", "29"),
    ]
    assert deleted_counter("awooop_outbox") - before == 2


def test_the_sweep_is_a_beat_task_on_the_maintenance_queue():
    import celeryconfig

    entry = next(e for e in celeryconfig.beat_schedule.values() if e["task"].endswith("retention"))
    assert entry["task"] == "awooop.sweeps.retention"
    assert entry["schedule"] == Settings().retention_interval_seconds
    assert celeryconfig.task_routes["awooop.sweeps.*"] == {"queue": "maintenance"}


def test_default_retention_is_thirty_days():
    assert Settings().run_retention_days == 30
    assert Settings().outbox_retention_days == 30
