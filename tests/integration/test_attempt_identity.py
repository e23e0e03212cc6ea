"""An attempt has one identity within a run, across operator resets: timer ids,
the step timeout's check and tool-result lookups rest on it, while the retry budgets count
from the last reset. Each test goes through the real timer sweep and checks which timers
fired."""

from __future__ import annotations

import threading
import uuid

from awooop.engine import runner, tools
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def _operate(engine, settings, project, operation, run_id) -> None:
    assert test_runs.operate(engine, settings, project, operation, run_id).applied


def _attempts(row: dict, step: str, phase: str) -> list[int]:
    return [
        e["attempt"]
        for e in row["saga_steps"]
        if e.get("step") == step and e.get("phase") == phase and e.get("status") != "DISPATCHED"
    ]


def test_a_compensation_failing_again_after_a_reset_gets_its_back_off_timer(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-undo-fails")
    # "d" rejects; undoing "a" fails, is retried once on its timer, then needs a person
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    # When the operator retries the compensation and it fails again
    _operate(engine, settings, project, "retry_compensation", run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED

    # Then its back-off timer is armed and fires (a fresh budget, a new identity)
    waiting.fire_when_due(engine, settings, run_id, "retry")
    timer_ids = [
        t["timer_id"]
        for t in db.rows(
            engine, "SELECT * FROM awooop_timer WHERE run_id = :r AND kind = 'retry'", r=run_id
        )
    ]
    assert sorted(timer_ids) == [
        f"{run_id}:compensate:a:retry:1",
        f"{run_id}:compensate:a:retry:3",
    ]
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED
    assert _attempts(db.run(engine, run_id), "a", "compensate") == [1, 2, 3, 4]


def test_a_step_timeout_still_applies_after_retry_resolution(engine, project, settings):
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(engine, project["project_id"], "test-halt-then-slow", {"gate": gate})
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    # When the operator has the step run again and this time it overruns its timeout
    _operate(engine, settings, project, "retry_resolution", run_id)
    worker, result = test_runs.execute_in_thread(engine, settings, run_id)
    try:
        waiting.until(lambda: wf.CALLS[str(run_id)].count("do:slow") == 2, what="the re-run")
        waiting.fire_when_due(engine, settings, run_id, "step_timeout")
    finally:
        wf.GATES[gate].set()
        worker.join(timeout=10)

    # Then the timeout took the run from the hung attempt (attempt 2, not the halted 1)
    assert result == [runner.Outcome.LEASE_LOST]
    row = db.run(engine, run_id)
    assert row["status"] == "PENDING"
    last = row["saga_steps"][-1]
    assert (last["step"], last["attempt"], last["status"]) == ("slow", 2, "UNKNOWN")


def test_a_tool_step_dispatches_again_after_a_reset_and_ignores_results_from_before(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-halting")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    tools.deliver_result(
        engine, project["project_id"], run_id, event_id="e1", step="diagnose", status="failed"
    )
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    waiting.fire_when_due(engine, settings, run_id, "retry")
    # the second dispatch halts: a person must look
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    # When the operator has the step run again
    _operate(engine, settings, project, "retry_resolution", run_id)

    # Then it dispatches a third call, not replaying attempt 1's failed result
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    assert wf.CALLS[str(run_id)].count("dispatch:diagnose") == 3
    dispatched = [
        e["attempt"]
        for e in db.run(engine, run_id)["saga_steps"]
        if e.get("status") == "DISPATCHED"
    ]
    assert dispatched == [1, 3]
