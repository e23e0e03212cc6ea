"""Step timeouts: a hung step is taken from its worker and its outcome becomes unknown."""

from __future__ import annotations

import threading
import time
import uuid

from sqlalchemy import text

from awooop.engine import runner, sweeps
from tests.support import db
from tests.support import runs as test_runs
from tests.support import workflows as wf


def test_a_step_that_overruns_its_timeout_is_fenced_out_and_escalated(engine, project, settings):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-step-timeout", {"gate": gate})
    outcome: list[runner.Outcome] = []
    hung = threading.Thread(target=lambda: outcome.append(runner.execute(engine, settings, run_id)))
    hung.start()
    time.sleep(0.35)  # past the 0.2 s timeout; the worker is still in the step

    fired = sweeps.fire_due_timers_once(engine, settings)

    assert [(t.kind, t.run_id) for t in fired] == [("step_timeout", run_id)]
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_epoch"]) == ("PENDING", None, 2)
    assert [(e["step"], e["status"]) for e in row["saga_steps"]] == [("slow", "UNKNOWN")]

    wf.GATES[gate].set()  # the hung step finally returns: its result is fenced out
    hung.join(timeout=10)
    assert outcome == [runner.Outcome.LEASE_LOST]
    assert [e["status"] for e in db.run(engine, run_id)["saga_steps"]] == ["UNKNOWN"]

    # No resolver: a person decides.
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED
    assert db.run(engine, run_id)["failure_code"] == "E-STEP-003"


def test_a_step_that_finishes_in_time_is_not_touched_by_its_timer(engine, project, settings):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    wf.GATES[gate].set()
    run_id = test_runs.admit(engine, project["project_id"], "test-step-timeout", {"gate": gate})

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    time.sleep(0.25)

    assert sweeps.fire_due_timers_once(engine, settings) == []
    assert db.run(engine, run_id)["status"] == "COMPLETED"
    with engine.connect() as conn:
        state = conn.execute(
            text("SELECT state FROM awooop_timer WHERE run_id = :r"), {"r": run_id}
        ).scalar_one()
    assert state == "SKIPPED"


def test_a_run_past_its_deadline_turns_back_and_fails(engine, project, settings):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-deadline", {"gate": gate})
    outcome: list[runner.Outcome] = []
    worker = threading.Thread(
        target=lambda: outcome.append(runner.execute(engine, settings, run_id))
    )
    worker.start()
    time.sleep(0.3)

    fired = sweeps.fire_due_timers_once(engine, settings)
    wf.GATES[gate].set()
    worker.join(timeout=10)

    assert [t.kind for t in fired] == ["deadline"]
    assert outcome == [runner.Outcome.FAILED]
    assert wf.CALLS[str(run_id)] == ["do:a", "do:wait", "undo:wait", "undo:a"]
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "E-SAGA-003",
    )


def test_a_deadline_after_the_run_finished_changes_nothing(engine, project, settings):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    wf.GATES[gate].set()
    run_id = test_runs.admit(engine, project["project_id"], "test-deadline", {"gate": gate})
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    time.sleep(0.25)

    assert sweeps.fire_due_timers_once(engine, settings) == []
    assert db.run(engine, run_id)["status"] == "COMPLETED"


def test_workflows_without_a_deadline_set_no_timer(engine, project):
    test_runs.admit(engine, project["project_id"], "noop-3")

    assert db.count(engine, "awooop_timer") == 0
