"""Unknown outcomes: the resolver settles them within its budget, or a person decides."""

from __future__ import annotations

import uuid

from awooop.engine import management, runner
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def drive(engine, settings, run_id, rounds: int = 10) -> runner.Outcome:
    """Execute, wait for poll timers, repeat until the segment is not a resolver wait."""
    for _ in range(rounds):
        outcome = runner.execute(engine, settings, run_id)
        if outcome is not runner.Outcome.RESOLVING:
            return outcome
        assert db.run(engine, run_id)["saga_status"] == "WAITING_RESOLUTION"
        waiting.fire_when_due(engine, settings, run_id, "retry")
    raise AssertionError("still resolving")


def test_an_unknown_outcome_resolved_as_done_lets_the_saga_continue(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-resolve", {"unknown_polls": 1})

    assert drive(engine, settings, run_id) == runner.Outcome.COMPLETED

    calls = wf.CALLS[str(run_id)]
    forward_effect = f"{run_id}:restart:forward"
    assert calls == [
        "do:a",
        "do:restart",
        f"resolve:restart:{forward_effect}",
        f"resolve:restart:{forward_effect}",
        "do:report",
    ]
    journal = db.run(engine, run_id)["saga_steps"]
    restart = [(e["phase"], e["status"]) for e in journal if e["step"] == "restart"]
    assert restart == [
        ("forward", "UNKNOWN"),
        ("resolve", "UNKNOWN"),
        ("resolve", "SUCCEEDED"),
        ("forward", "SUCCEEDED"),
    ]
    assert db.run(engine, run_id)["saga_status"] == "COMPLETED"


def test_an_unknown_outcome_resolved_as_not_done_compensates(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-resolve", {"verdict": "rejected"})

    assert drive(engine, settings, run_id) == runner.Outcome.FAILED

    row = db.run(engine, run_id)
    assert (row["saga_status"], row["failure_code"]) == ("COMPENSATED", "E-STEP-001")
    assert wf.CALLS[str(run_id)][-1] == "undo:a"  # restart never happened: nothing to undo


def test_resolution_budget_exhausted_escalates_and_retry_resolution_resumes(
    engine, project, settings
):
    run_id = test_runs.admit(
        engine, project["project_id"], "test-resolve", {"unknown_polls": 3}
    )  # budget 0.3 s / 0.1 s = 3 polls

    assert drive(engine, settings, run_id) == runner.Outcome.ESCALATED
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "WAITING_APPROVAL",
        "MANUAL_INTERVENTION",
        "E-STEP-003",
    )

    management.operate(
        engine,
        settings,
        "retry_resolution",
        project["project_id"],
        run_id,
        operation_id=uuid.uuid4().hex,
        actor="bob",
        reason="checked by hand",
    )

    assert drive(engine, settings, run_id) == runner.Outcome.COMPLETED


def test_an_unknown_outcome_without_a_resolver_goes_to_a_person(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-no-resolver")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    row = db.run(engine, run_id)
    assert (row["saga_status"], row["failure_code"]) == ("MANUAL_INTERVENTION", "E-STEP-003")
    assert "no resolver" in row["failure_reason"]
