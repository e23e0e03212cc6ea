"""Step timeouts: a hung step is taken from its worker and its outcome becomes unknown."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid

import pytest
from sqlalchemy import text

from awooop.engine import management, runner, sweeps
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def test_a_step_that_overruns_its_timeout_is_fenced_out_and_escalated(engine, project, settings):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-step-timeout", {"gate": gate})
    outcome: list[runner.Outcome] = []
    hung = threading.Thread(target=lambda: outcome.append(runner.execute(engine, settings, run_id)))
    hung.start()

    fired = waiting.fire_when_due(engine, settings, run_id, "step_timeout")  # still in the step

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


def test_a_wedged_step_with_no_timeout_of_its_own_is_taken_at_the_default_timeout(
    engine, project, settings
):
    # The handler blocks on a gate and never checks its lease: only the timeout frees the run.
    settings = dataclasses.replace(settings, step_timeout_seconds=0.2)
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-gated", {"gate": gate})
    outcome: list[runner.Outcome] = []
    wedged = threading.Thread(
        target=lambda: outcome.append(runner.execute(engine, settings, run_id))
    )
    wedged.start()
    try:
        fired = waiting.fire_when_due(engine, settings, run_id, "step_timeout")

        assert [(t.kind, t.run_id, t.step, t.fired) for t in fired] == [
            ("step_timeout", run_id, "wait", True)
        ]
        row = db.run(engine, run_id)
        assert (row["status"], row["worker_id"], row["lease_epoch"]) == ("PENDING", None, 2)
        assert [(e["step"], e["status"]) for e in row["saga_steps"]] == [("wait", "UNKNOWN")]
    finally:
        wf.GATES[gate].set()  # the wedged handler finally returns: its result is fenced out
        wedged.join(timeout=30)
    assert outcome == [runner.Outcome.LEASE_LOST]
    assert [e["status"] for e in db.run(engine, run_id)["saga_steps"]] == ["UNKNOWN"]

    # The step has no resolver: the next worker hands it to a person.
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED
    row = db.run(engine, run_id)
    assert (row["saga_status"], row["failure_code"]) == ("MANUAL_INTERVENTION", "E-STEP-003")


def _step_timeout_seconds(engine, run_id) -> float | None:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT extract(epoch FROM due_at - created_at)::float8 FROM awooop_timer"
                " WHERE run_id = :r AND kind = 'step_timeout'"
            ),
            {"r": run_id},
        ).scalar_one_or_none()


def test_quick_steps_with_no_timeout_of_their_own_write_no_timer(engine, project, settings):
    # The default is armed by the lease keeper only for a step still running after a
    # renewal interval: a run of quick steps pays no write for it.
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    assert db.count(engine, "awooop_timer") == 0


def test_a_step_timeout_of_its_own_replaces_the_default(engine, project, settings):
    settings = dataclasses.replace(settings, step_timeout_seconds=0.2)
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(
        engine, project["project_id"], "test-step-timeout-long", {"gate": gate}
    )
    outcome: list[runner.Outcome] = []
    worker = threading.Thread(
        target=lambda: outcome.append(runner.execute(engine, settings, run_id))
    )
    worker.start()
    try:
        armed = waiting.until(
            lambda: _step_timeout_seconds(engine, run_id), what="the step timeout timer"
        )
    finally:
        wf.GATES[gate].set()
        worker.join(timeout=30)

    assert armed == pytest.approx(30.0, abs=0.5)
    assert outcome == [runner.Outcome.COMPLETED]


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
            text("SELECT state FROM awooop_timer WHERE run_id = :r AND step = 'slow'"),
            {"r": run_id},
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


def _armed(engine, run_id, step: str) -> bool:
    with engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT EXISTS (SELECT 1 FROM awooop_timer WHERE run_id = :r"
                    " AND kind = 'step_timeout' AND step = :s AND state = 'PENDING')"
                ),
                {"r": run_id, "s": step},
            ).scalar_one()
        )


def _taken_while_cancelling(engine, run_id, step: str) -> None:
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["worker_id"]) == ("PENDING", "CANCELLING", None)
    assert row["lease_epoch"] == 2
    assert [(e["step"], e["status"]) for e in row["saga_steps"]][-1] == (step, "UNKNOWN")


def test_a_wedged_step_cancelled_while_it_hangs_is_still_taken_at_its_timeout(
    engine, project, settings
):
    # An operator cancels the stuck run: the worker never reaches a step boundary to see it,
    # so the step timeout must still take the run.
    settings = dataclasses.replace(settings, step_timeout_seconds=0.5)
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-gated", {"gate": gate})
    wedged, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    try:
        waiting.until(lambda: _armed(engine, run_id, "wait"), what="the step timeout armed")
        management.operate(
            engine,
            settings,
            "cancel",
            project["project_id"],
            run_id,
            operation_id=uuid.uuid4().hex,
            actor="alice",
            reason="stuck",
        )

        waiting.fire_when_due(engine, settings, run_id, "step_timeout")

        _taken_while_cancelling(engine, run_id, "wait")
    finally:
        wf.GATES[gate].set()
        wedged.join(timeout=30)
    assert outcome == [runner.Outcome.LEASE_LOST]


def test_a_wedged_step_past_the_run_deadline_is_still_taken_at_its_timeout(
    engine, project, settings
):
    # (a default the run deadline passes first, and long enough for the keeper, which arms a
    # long step's timeout at its next tick, to have armed it before the deadline fires)
    settings = dataclasses.replace(settings, step_timeout_seconds=3.0)
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-deadline", {"gate": gate})
    wedged, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    try:
        waiting.until(lambda: _armed(engine, run_id, "wait"), what="the step timeout armed")
        waiting.fire_when_due(engine, settings, run_id, "deadline")
        assert db.run(engine, run_id)["saga_status"] == "CANCELLING"

        waiting.fire_when_due(engine, settings, run_id, "step_timeout")

        _taken_while_cancelling(engine, run_id, "wait")
    finally:
        wf.GATES[gate].set()
        wedged.join(timeout=30)
    assert outcome == [runner.Outcome.LEASE_LOST]
