"""Tool steps: WAITING_TOOL, results through the HTTP API, the inbox, timeouts, late results."""

from __future__ import annotations

import json
import time

from awooop.engine import runner, sweeps
from tests.integration.conftest import queued_messages
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def deliver(client, project, run_id, **body):
    body = {"event_id": "evt-1", "step": "diagnose", "status": "succeeded", **body}
    return client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/tool-results",
        headers={
            "Authorization": f"Bearer {project['api_token']}",
            "Content-Type": "application/json",
        },
        data=json.dumps(body),
    )


def test_tool_step_releases_the_worker_and_the_result_resumes_the_run(
    client, engine, project, settings, redis_client
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    row = db.run(engine, run_id)
    assert (row["status"], row["current_step"], row["lease_until"]) == (
        "WAITING_TOOL",
        "diagnose",
        None,
    )
    assert sweeps.reap_once(engine) == []  # the reaper leaves waiting runs alone

    response = deliver(client, project, run_id, output={"disk": "91%"})
    assert (response.status_code, response.json) == (202, {"status": "accepted"})
    assert queued_messages(redis_client) == 1
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    journal = db.run(engine, run_id)["saga_steps"]
    diagnose = [
        (e["phase"], e.get("status"), e.get("output")) for e in journal if e["step"] == "diagnose"
    ]
    assert diagnose == [
        ("forward", "DISPATCHED", {"correlation_id": f"{run_id}:diagnose:forward"}),
        ("tool_result", "SUCCEEDED", {"disk": "91%"}),
        ("forward", "SUCCEEDED", {"disk": "91%"}),
    ]
    assert wf.CALLS[str(run_id)] == ["do:a", "dispatch:diagnose", "do:report"]


def test_a_duplicate_result_is_accepted_once(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    runner.execute(engine, settings, run_id)

    first = deliver(client, project, run_id, output={"n": 1})
    again = deliver(client, project, run_id, output={"n": 1})
    changed = deliver(client, project, run_id, output={"n": 2})

    assert first.status_code == 202
    assert (again.status_code, again.json["code"]) == (200, "E-IDEMPOTENT-001")
    assert (changed.status_code, changed.json["error"]["code"]) == (422, "E-IDEMPOTENT-002")
    results = [e for e in db.run(engine, run_id)["saga_steps"] if e["phase"] == "tool_result"]
    assert len(results) == 1


def test_a_rejected_tool_result_compensates(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    runner.execute(engine, settings, run_id)

    deliver(client, project, run_id, status="rejected", error="host is locked")

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED
    row = db.run(engine, run_id)
    assert (row["saga_status"], row["failure_code"]) == ("COMPENSATED", "E-STEP-001")
    assert "host is locked" in row["failure_reason"]
    assert wf.CALLS[str(run_id)][-1] == "undo:a"


def test_a_missing_result_times_out_and_the_call_is_dispatched_again(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-timeout")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    time.sleep(0.15)

    fired = sweeps.fire_due_timers_once(engine, settings)

    assert [(t.kind, t.run_id) for t in fired] == [("tool_timeout", run_id)]
    assert db.run(engine, run_id)["status"] == "PENDING"
    # The timeout is a transient failure: retried, i.e. dispatched again, same effect id.
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    fired = sweeps.fire_due_timers_once(engine, settings)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    dispatches = [
        e for e in db.run(engine, run_id)["saga_steps"] if e.get("status") == "DISPATCHED"
    ]
    assert [(e["attempt"], e["output"]["correlation_id"]) for e in dispatches] == [
        (1, f"{run_id}:diagnose:forward"),
        (2, f"{run_id}:diagnose:forward"),
    ]


def time_out_once(engine, settings, run_id) -> None:
    """Dispatch, let the tool timeout fire, and let a worker decide the missing result."""
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    waiting.fire_when_due(engine, settings, run_id, "tool_timeout")


def test_a_result_after_the_run_moved_on_is_late_and_changes_nothing(
    client, engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-once")
    time_out_once(engine, settings, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED  # compensated
    before = db.run(engine, run_id)

    response = deliver(client, project, run_id, event_id="late-1")

    assert (response.status_code, response.json["status"]) == (200, "late")
    after = db.run(engine, run_id)
    assert (after["status"], after["version"], after["saga_steps"]) == (
        before["status"],
        before["version"],
        before["saga_steps"],
    )
    late = [e for e in db.events(engine, run_id) if e["kind"] == "late_result"]
    assert [(e["trigger_id"], e["detail"]["status"]) for e in late] == [("late-1", "SUCCEEDED")]


def test_a_late_success_while_the_step_waits_for_its_retry_is_accepted(
    client, engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-timeout")
    time_out_once(engine, settings, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED

    response = deliver(client, project, run_id, event_id="late-1", output={"disk": "80%"})

    assert response.status_code == 202
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    assert wf.CALLS[str(run_id)].count("dispatch:diagnose") == 1  # not dispatched again
    journal = db.run(engine, run_id)["saga_steps"]
    late = [e for e in journal if e["phase"] == "tool_result" and e.get("late")]
    assert [(e["attempt"], e["event_id"]) for e in late] == [(2, "late-1")]
    assert journal[-1]["output"] == {"disk": "80%"}


def test_a_late_success_is_ignored_when_the_step_says_so(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-ignore-late")
    time_out_once(engine, settings, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED

    response = deliver(client, project, run_id, event_id="late-1")

    assert response.json["status"] == "late"
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    assert wf.CALLS[str(run_id)].count("dispatch:diagnose") == 2  # dispatched again


def test_tool_result_bad_input_is_refused_and_writes_nothing(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    runner.execute(engine, settings, run_id)
    before = db.run(engine, run_id)

    assert deliver(client, project, run_id, status="maybe").status_code == 400
    assert deliver(client, project, run_id, status=["succeeded"]).status_code == 400
    assert deliver(client, project, run_id, step=7).status_code == 400
    assert deliver(client, project, run_id, event_id="").status_code == 400
    assert deliver(client, project, "not-a-uuid").status_code == 404
    wrong_token = client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/tool-results",
        headers={"Authorization": "Bearer nope", "Content-Type": "application/json"},
        data="{}",
    )
    assert wrong_token.status_code == 401
    assert db.run(engine, run_id) == before
    assert db.count(engine, "awooop_inbox") == 0


def test_a_different_result_for_an_attempt_already_decided_is_a_conflict(
    client, engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    runner.execute(engine, settings, run_id)
    assert deliver(client, project, run_id, event_id="r-1", output={"n": 1}).status_code == 202

    conflicting = deliver(
        client, project, run_id, event_id="r-2", status="rejected", error="actually it failed"
    )

    assert conflicting.json["status"] == "late"
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "WAITING_APPROVAL",
        "MANUAL_INTERVENTION",
        "E-SAGA-004",
    )
    [conflict] = [e for e in db.events(engine, run_id) if e["kind"] == "conflict"]
    assert conflict["detail"]["recorded"]["event_id"] == "r-1"
    assert conflict["detail"]["conflicting"] == {"status": "REJECTED", "event_id": "r-2"}
    # The first outcome is never overwritten.
    results = [e for e in row["saga_steps"] if e["phase"] == "tool_result"]
    assert [(e["event_id"], e["status"]) for e in results] == [("r-1", "SUCCEEDED")]


def test_the_same_result_under_another_event_id_is_not_a_conflict(
    client, engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    runner.execute(engine, settings, run_id)
    deliver(client, project, run_id, event_id="r-1", output={"n": 1})

    deliver(client, project, run_id, event_id="r-2", output={"n": 1})

    assert db.run(engine, run_id)["status"] == "PENDING"
    assert [e for e in db.events(engine, run_id) if e["kind"] == "conflict"] == []


def test_a_late_success_the_saga_gave_up_on_is_compensated_by_a_follow_up_run(
    client, engine, project, settings, redis_client
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool-compensate-late")
    time_out_once(engine, settings, run_id)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED  # gave up
    redis_client.delete("runs")

    response = deliver(client, project, run_id, event_id="late-1", output={"ticket": 7})
    again = deliver(client, project, run_id, event_id="late-2", output={"ticket": 7})

    assert response.json["status"] == "late"
    follow_up = response.json["compensation_run_id"]
    assert "compensation_run_id" not in again.json  # one follow-up per run and step
    assert queued_messages(redis_client) == 1
    assert runner.execute(engine, settings, follow_up) == runner.Outcome.COMPLETED
    assert wf.CALLS[str(run_id)][-1] == "undo:diagnose"
    row = db.run(engine, follow_up)
    assert (row["workflow_name"], row["channel_type"]) == ("late-compensation", "internal")
    assert db.run(engine, run_id)["status"] == "FAILED"  # the original run keeps its end


def test_late_result_policy_is_checked_when_the_workflow_is_declared():
    import pytest

    from awooop.domain.workflow import Step

    with pytest.raises(ValueError, match="needs a compensation"):
        Step("x", wf._dispatch, tool_timeout=1.0, late_result="compensate")
    with pytest.raises(ValueError, match="late_result must be one of"):
        Step("x", wf._dispatch, tool_timeout=1.0, late_result="maybe")
