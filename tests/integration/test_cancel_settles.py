"""A cancel (or the run deadline) settles a step in doubt before compensating, through the
real runner against PostgreSQL: a resolver's verdict, a tool's result or its timeout, or a
person says whether the step happened, and only a step that happened is compensated."""

from __future__ import annotations

import threading
import uuid

from awooop import db as awooop_db
from awooop.engine import runner, tools
from awooop.store import timers
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def _waiting_for_resolution(engine, settings, project, **event) -> object:
    """A test-resolve run whose "restart" step's outcome is UNKNOWN, waiting for its first
    resolver poll."""
    run_id = test_runs.admit(engine, project["project_id"], "test-resolve", event)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RESOLVING
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("PENDING", "WAITING_RESOLUTION")
    return run_id


def _cancel(engine, settings, project, run_id) -> None:
    assert test_runs.operate(engine, settings, project, "cancel", run_id).applied


def _ended(engine, run_id) -> tuple[str, str, str]:
    row = db.run(engine, run_id)
    return row["status"], row["saga_status"], row["failure_code"]


def test_a_step_resolved_as_happened_is_compensated_before_the_run_ends_cancelled(
    engine, project, settings
):
    # Given a restart whose outcome is unknown, and a resolver that will say it happened
    run_id = _waiting_for_resolution(engine, settings, project)

    # When an operator cancels and a worker takes the run
    _cancel(engine, settings, project, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED

    # Then the resolver was asked first, and the restart was undone before "a"
    assert wf.CALLS[str(run_id)] == [
        "do:a",
        "do:restart",
        f"resolve:restart:{run_id}:restart:forward",
        "undo:restart",
        "undo:a",
    ]
    assert _ended(engine, run_id) == ("CANCELLED", "COMPENSATED", "E-SAGA-002")
    journal = db.run(engine, run_id)["saga_steps"]
    (plan,) = [e for e in journal if e["phase"] == "plan"]
    assert plan["steps"] == ["restart", "a"]
    settled = [e for e in journal if e.get("step") == "restart" and e["phase"] == "forward"]
    assert [(e["status"], e.get("resolved")) for e in settled] == [
        ("UNKNOWN", None),
        ("SUCCEEDED", True),
    ]


def test_a_step_resolved_as_not_happened_is_not_compensated(engine, project, settings):
    run_id = _waiting_for_resolution(engine, settings, project, verdict="rejected")

    _cancel(engine, settings, project, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED

    calls = wf.CALLS[str(run_id)]
    assert calls[-1] == "undo:a" and "undo:restart" not in calls
    assert calls[2].startswith("resolve:restart")
    assert _ended(engine, run_id) == ("CANCELLED", "COMPENSATED", "E-SAGA-002")


def test_a_resolver_that_cannot_tell_is_polled_within_its_budget_then_a_person_decides(
    engine, project, settings
):
    # Given a resolver that never knows (budget: two polls)
    run_id = _waiting_for_resolution(engine, settings, project, unknown_polls=99)
    _cancel(engine, settings, project, run_id)

    # When a worker polls it under the cancel: the cancel is kept while it waits
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "PENDING",
        "CANCELLING",
        "E-SAGA-002",
    )
    waiting.fire_when_due(engine, settings, run_id, "retry")

    # Then past the budget the run goes to a person, nothing compensated
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "WAITING_APPROVAL",
        "MANUAL_INTERVENTION",
        "E-SAGA-002",  # the cancel waits for the person
    )
    assert "cancelled by an operator" in row["failure_reason"]
    calls = wf.CALLS[str(run_id)]
    assert len([c for c in calls if c.startswith("resolve:")]) == 2
    assert not [c for c in calls if c.startswith("undo:")]


def test_retry_resolution_of_a_step_a_cancel_waits_for_resumes_the_cancel(
    engine, project, settings
):
    # Given a cancel handed to a person: the resolver could not tell within its two polls
    run_id = _waiting_for_resolution(engine, settings, project, unknown_polls=2)
    _cancel(engine, settings, project, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    # When the operator retries the resolution
    result = test_runs.operate(engine, settings, project, "retry_resolution", run_id)

    # Then the run goes back to the cancel (not forward), and once the resolver says the
    # restart happened, it is undone
    assert (result.status, result.saga_status) == ("RESUMED", "CANCELLING")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED
    calls = wf.CALLS[str(run_id)]
    assert calls[-2:] == ["undo:restart", "undo:a"] and "do:report" not in calls
    assert _ended(engine, run_id) == ("CANCELLED", "COMPENSATED", "E-SAGA-002")


def _deliver(engine, project, run_id, status: str, event_id: str = "evt-1") -> bool:
    outcome = tools.deliver_result(
        engine,
        project["project_id"],
        run_id,
        event_id=event_id,
        step="diagnose",
        status=status,
        output={"disk": "91%"} if status == "succeeded" else None,
    )
    return outcome.delivery.accepted


def test_a_cancel_waits_for_a_dispatched_tool_call_and_undoes_it_when_it_succeeded(
    engine, project, settings
):
    # Given a run waiting for a tool call's result
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-undone")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL

    # When an operator cancels: the run keeps waiting for the result
    _cancel(engine, settings, project, run_id)
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("WAITING_TOOL", "CANCELLING")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.NOT_CLAIMED

    # and the result comes in: the call happened, so it is undone
    assert _deliver(engine, project, run_id, "succeeded")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED
    assert wf.CALLS[str(run_id)] == ["do:a", "dispatch:diagnose", "undo:diagnose", "undo:a"]
    assert _ended(engine, run_id) == ("CANCELLED", "COMPENSATED", "E-SAGA-002")


def test_a_failed_tool_result_under_a_cancel_is_not_retried_nor_undone(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-undone")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    _cancel(engine, settings, project, run_id)

    assert _deliver(engine, project, run_id, "failed")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED

    assert wf.CALLS[str(run_id)] == ["do:a", "dispatch:diagnose", "undo:a"]
    assert _ended(engine, run_id) == ("CANCELLED", "COMPENSATED", "E-SAGA-002")


def test_a_cancel_waits_for_the_tool_timeout_when_no_result_comes(engine, project, settings):
    # Given a run waiting for a tool call with a short timeout, cancelled
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-compensate-late")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    _cancel(engine, settings, project, run_id)

    # When the timeout fires (the cancel kept it armed)
    waiting.fire_when_due(engine, settings, run_id, "tool_timeout")
    assert db.run(engine, run_id)["status"] == "PENDING"

    # Then the missing result counts as a call that failed: only "a" is undone
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED
    assert wf.CALLS[str(run_id)] == ["do:a", "dispatch:diagnose", "undo:a"]
    assert _ended(engine, run_id) == ("CANCELLED", "COMPENSATED", "E-SAGA-002")


def test_the_run_deadline_waits_for_a_dispatched_tool_call_too(engine, project, settings):
    # step "a", then the tool step "hold", whose handler waits on a gate: open at once
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    wf.GATES[gate].set()
    run_id = test_runs.admit(
        engine, project["project_id"], "test-held-tool-deadline", {"gate": gate, "outcome": "tool"}
    )
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL

    waiting.fire_when_due(engine, settings, run_id, "deadline")

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "WAITING_TOOL",
        "CANCELLING",
        "E-SAGA-003",
    )
    outcome = tools.deliver_result(
        engine,
        project["project_id"],
        run_id,
        event_id="evt-1",
        step="hold",
        status="succeeded",
        output={},
    )
    assert outcome.delivery.accepted
    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED
    assert wf.CALLS[str(run_id)][-2:] == ["undo:hold", "undo:a"]
    assert _ended(engine, run_id) == ("FAILED", "COMPENSATED", "E-SAGA-003")


def _tool_timeout_timers(engine, run_id) -> dict[int, dict]:
    rows = db.rows(
        engine,
        "SELECT * FROM awooop_timer WHERE run_id = :r AND kind = 'tool_timeout'",
        r=run_id,
    )
    return {row["attempt"]: row for row in rows}


def test_a_cancel_keeps_the_awaited_calls_timeout_and_no_stale_one(engine, project, settings):
    # Given a tool step on its second call: the first failed, its timeout timer left stale
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-undone")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    assert _deliver(engine, project, run_id, "failed")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL

    # When an operator cancels
    _cancel(engine, settings, project, run_id)

    # Then the second call's timeout is valid at the run's new version, the first's is not
    version = db.run(engine, run_id)["version"]
    armed = _tool_timeout_timers(engine, run_id)
    assert armed[2]["expected_version"] == version
    assert armed[1]["expected_version"] != version


def test_a_tool_timeout_swept_with_the_run_deadline_still_applies(engine, project, settings):
    # Given a run waiting for a tool call, its timeout and its deadline both due in one batch
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-undone")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    tool_timer = _tool_timeout_timers(engine, run_id)[1]
    fired_timeout = timers.FiredTimer(
        tool_timer["timer_id"],
        run_id,
        "tool_timeout",
        True,
        0.0,
        "diagnose",
        1,
        tool_timer["expected_version"],
    )
    fired_deadline = timers.FiredTimer(f"{run_id}:deadline", run_id, "deadline", True, 0.0)

    # When the deadline's effect is applied first, then the timeout's (same transaction)
    with awooop_db.transaction(engine) as conn:
        assert timers.deadline_passed(conn, fired_deadline)
        timed_out = timers.tool_timed_out(conn, fired_timeout)

    # Then the missing result is still recorded: the run does not wait forever
    assert timed_out
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("PENDING", "CANCELLING")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED
    assert wf.CALLS[str(run_id)] == ["do:a", "dispatch:diagnose", "undo:a"]
