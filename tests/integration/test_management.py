"""Management operations through the engine API, against a real PostgreSQL."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from awooop import errors
from awooop.engine import management, runner, sweeps
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def operate(engine, settings, project, operation, run_id, operation_id=None, **kw):
    return management.operate(
        engine,
        settings,
        operation,
        project["project_id"],
        run_id,
        operation_id=operation_id or uuid.uuid4().hex,
        actor="alice",
        reason="test",
        **kw,
    )


def gated_run(engine, project):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-steerable", {"gate": gate})
    return run_id, wf.GATES[gate]


def run_in_thread(engine, settings, run_id):
    thread, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    # Inside the handler: the step boundary before it, where an intent is seen, is passed.
    waiting.until(lambda: "do:wait" in wf.CALLS.get(str(run_id), []), what="inside step wait")
    return thread, outcome


def test_pause_stops_a_running_run_at_the_next_step_boundary_and_resume_continues(
    engine, project, settings
):
    run_id, gate = gated_run(engine, project)
    thread, outcome = run_in_thread(engine, settings, run_id)

    operate(engine, settings, project, "pause", run_id)
    gate.set()
    thread.join(timeout=10)

    assert outcome == [runner.Outcome.PAUSED]
    row = db.run(engine, run_id)
    assert (row["status"], row["control_state"]) == ("PENDING", "PAUSED")
    assert [e["step"] for e in row["saga_steps"]] == ["a", "wait"]  # "c" did not start
    assert runner.execute(engine, settings, run_id) == runner.Outcome.NOT_CLAIMED

    operate(engine, settings, project, "resume", run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    assert wf.CALLS[str(run_id)] == ["do:a", "do:wait", "do:c"]


def test_pause_defers_timers_and_resume_releases_them(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-flaky", {"fail_times": 1})
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    operate(engine, settings, project, "pause", run_id)
    time.sleep(0.3)

    assert sweeps.fire_due_timers_once(engine, settings) == []

    operate(engine, settings, project, "resume", run_id)
    assert [t.run_id for t in sweeps.fire_due_timers_once(engine, settings)] == [run_id]
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED


def test_cancel_turns_a_running_saga_back_and_ends_cancelled(engine, project, settings):
    run_id, gate = gated_run(engine, project)
    thread, outcome = run_in_thread(engine, settings, run_id)

    operate(engine, settings, project, "cancel", run_id)
    gate.set()
    thread.join(timeout=10)

    assert outcome == [runner.Outcome.CANCELLED]
    assert wf.CALLS[str(run_id)] == ["do:a", "do:wait", "undo:wait", "undo:a"]
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "CANCELLED",
        "COMPENSATED",
        "E-SAGA-002",
    )


def test_cancel_of_a_run_nobody_holds_is_carried_out_by_the_next_claim(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-saga")

    result = operate(engine, settings, project, "cancel", run_id)
    assert result.saga_status == "CANCELLING"

    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED
    assert str(run_id) not in wf.CALLS  # nothing ran, nothing to undo
    assert db.run(engine, run_id)["status"] == "CANCELLED"


def test_the_same_operation_id_twice_is_one_effect_and_one_audit_row(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"])

    first = operate(engine, settings, project, "pause", run_id, operation_id="op-1")
    again = operate(engine, settings, project, "pause", run_id, operation_id="op-1")

    assert (first.applied, first.replayed) == (True, False)
    assert (again.applied, again.replayed) == (False, True)
    assert again.version == first.version
    audit = [e for e in db.events(engine, run_id) if e["trigger"] == "operator"]
    assert [(e["trigger_id"], e["actor"], e["detail"]["operation"]) for e in audit] == [
        ("op-1", "alice", "pause")
    ]


def test_an_operation_whose_precondition_fails_is_refused_and_changes_nothing(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"])
    operate(engine, settings, project, "pause", run_id)
    before = db.run(engine, run_id)

    with pytest.raises(errors.OperationRefused) as refused:
        operate(engine, settings, project, "pause", run_id)

    assert refused.value.http_status == 409
    assert db.run(engine, run_id) == before


def test_a_stale_expected_version_is_refused_with_412(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"])
    version = db.run(engine, run_id)["version"]

    with pytest.raises(errors.VersionMismatch):
        operate(engine, settings, project, "pause", run_id, expected_version=version + 5)
    result = operate(engine, settings, project, "pause", run_id, expected_version=version)

    assert result.version == version + 1


def test_retry_compensation_resets_the_budget_and_finishes_the_rollback(
    engine, project, settings, tmp_path
):
    fixed = tmp_path / "fixed"
    run_id = test_runs.admit(
        engine, project["project_id"], "test-undo-needs-fix", {"fixed": str(fixed)}
    )
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    fixed.touch()  # a person fixed what blocked the rollback
    operate(engine, settings, project, "retry_compensation", run_id)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("FAILED", "COMPENSATED")
    assert wf.CALLS[str(run_id)] == ["do:a", "do:d", "undo:a", "undo:a"]


def test_retry_compensation_is_refused_for_a_run_that_is_not_stuck(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"])

    with pytest.raises(errors.OperationRefused):
        operate(engine, settings, project, "retry_compensation", run_id)


def test_manual_close_is_off_unless_enabled(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-halt")
    runner.execute(engine, settings, run_id)

    with pytest.raises(errors.ManualCloseDisabled):
        operate(engine, settings, project, "manual_close", run_id)

    enabled = settings.__class__(**{**settings.__dict__, "manual_close_enabled": 1})
    operate(engine, enabled, project, "manual_close", run_id)
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("CANCELLED", "MANUALLY_CLOSED")


def test_operations_on_another_projects_run_are_not_found(engine, project, settings):
    from awooop import cli

    other = cli.create_project(settings, "other-project")
    run_id = test_runs.admit(engine, other["project_id"])

    with pytest.raises(errors.NotFound):
        operate(engine, settings, project, "pause", run_id)


def _stuck_in_compensation(engine, project, settings, tmp_path):
    run_id = test_runs.admit(
        engine, project["project_id"], "test-undo-needs-fix", {"fixed": str(tmp_path / "never")}
    )
    runner.execute(engine, settings, run_id)
    return run_id


def _escalated(workflow):
    def make(engine, project, settings, tmp_path):
        run_id = test_runs.admit(engine, project["project_id"], workflow)
        runner.execute(engine, settings, run_id)
        return run_id

    return make


def _paused(engine, project, settings, tmp_path):
    run_id = test_runs.admit(engine, project["project_id"])
    operate(engine, settings, project, "pause", run_id)
    return run_id


def _pending(engine, project, settings, tmp_path):
    return test_runs.admit(engine, project["project_id"])


@pytest.mark.parametrize(
    ("operation", "setup"),
    [
        ("pause", _pending),
        ("resume", _paused),
        ("cancel", _pending),
        ("retry_compensation", _stuck_in_compensation),
        ("retry_resolution", _escalated("test-no-resolver")),
        ("manual_close", _escalated("test-halt")),
    ],
)
def test_every_operation_is_one_effect_and_one_audit_row_per_operation_id(
    engine, project, settings, tmp_path, operation, setup
):
    enabled = settings.__class__(**{**settings.__dict__, "manual_close_enabled": 1})
    run_id = setup(engine, project, enabled, tmp_path)
    version = db.run(engine, run_id)["version"]

    first = operate(engine, enabled, project, operation, run_id, operation_id="op-x")
    again = operate(engine, enabled, project, operation, run_id, operation_id="op-x")

    assert (first.applied, again.applied, again.replayed) == (True, False, True)
    assert db.run(engine, run_id)["version"] == version + 1
    audit = [
        e
        for e in db.events(engine, run_id)
        if e["trigger"] == "operator" and e["trigger_id"] == "op-x"
    ]
    assert [(e["actor"], e["detail"]["operation"]) for e in audit] == [("alice", operation)]
