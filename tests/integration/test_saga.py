"""The saga engine over a real PostgreSQL: compensation, retries, escalation, timers."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from sqlalchemy import text

from awooop.domain.workflow import Step, Workflow
from awooop.engine import runner, sweeps
from awooop.workflows import registry
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


def execute(engine, settings, run_id) -> runner.Outcome:
    return runner.execute(engine, settings, run_id)


def fire_timers(engine, settings) -> list:
    return sweeps.fire_due_timers_once(engine, settings)


def test_rejection_compensates_succeeded_steps_in_reverse_order_once_each(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-saga")

    assert execute(engine, settings, run_id) == runner.Outcome.FAILED

    assert wf.CALLS[str(run_id)] == ["do:a", "do:b", "do:c", "do:d", "undo:c", "undo:a"]
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["direction"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "BACKWARD",
        "E-STEP-001",
    )
    plan = next(e for e in row["saga_steps"] if e["phase"] == "plan")
    assert plan["steps"] == ["c", "a"]  # b has no compensation; d never succeeded
    assert plan["cause"]["step"] == "d"
    undone = [(e["step"], e["status"]) for e in row["saga_steps"] if e["phase"] == "compensate"]
    assert undone == [("c", "SUCCEEDED"), ("a", "SUCCEEDED")]
    history = [
        (e["kind"], e["to_status"], e["detail"].get("saga_status"))
        for e in db.events(engine, run_id)
    ]
    assert history[-2:] == [
        ("saga", "RUNNING", "COMPENSATING"),
        ("transition", "FAILED", "COMPENSATED"),
    ]


def test_compensation_effect_ids_differ_from_forward_ones(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-saga")
    execute(engine, settings, run_id)

    journal = db.run(engine, run_id)["saga_steps"]
    ids = {(e["step"], e["phase"]): e["effect_id"] for e in journal if e["phase"] != "plan"}

    assert ids[("c", "forward")] == f"{run_id}:c:forward"
    assert ids[("c", "compensate")] == f"{run_id}:c:compensate"


def test_transient_failure_retries_with_growing_back_off_and_succeeds(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-flaky", {"fail_times": 2})
    outcomes = []
    delays = []
    for _ in range(3):
        outcomes.append(execute(engine, settings, run_id))
        row = db.run(engine, run_id)
        if row["status"] == "PENDING":
            delays.append((row["available_at"] - row["updated_at"]).total_seconds())
            # Not claimable before its time, and woken by its timer, not by a message.
            assert execute(engine, settings, run_id) == runner.Outcome.NOT_CLAIMED
            time.sleep(delays[-1] + 0.05)
            assert [t.run_id for t in fire_timers(engine, settings)] == [run_id]

    assert outcomes == [
        runner.Outcome.RETRY_SCHEDULED,
        runner.Outcome.RETRY_SCHEDULED,
        runner.Outcome.COMPLETED,
    ]
    assert delays[0] == 0.2 and delays[1] == 0.4  # base 0.2 s, factor 2, no jitter
    journal = db.run(engine, run_id)["saga_steps"]
    flaky = [(e["attempt"], e["status"]) for e in journal if e["step"] == "flaky"]
    assert flaky == [(1, "FAILED"), (2, "FAILED"), (3, "SUCCEEDED")]
    assert wf.CALLS[str(run_id)].count("do:a") == 1  # a recorded step is never re-run


def test_a_retry_resets_the_crash_budget(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-flaky", {"fail_times": 1})

    execute(engine, settings, run_id)

    assert db.run(engine, run_id)["attempt_count"] == 0


def test_exhausted_retries_compensate(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-exhausted", {"fail_times": 9})

    assert execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED
    waiting.fire_when_due(engine, settings, run_id, "retry")
    assert execute(engine, settings, run_id) == runner.Outcome.FAILED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "E-STEP-002",
    )
    assert wf.CALLS[str(run_id)] == ["do:a", "do:flaky", "do:flaky", "undo:a"]


def test_halt_escalates_to_manual_intervention_and_the_reaper_leaves_it(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-halt")

    assert execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"], row["attempt_count"]) == (
        "WAITING_APPROVAL",
        "MANUAL_INTERVENTION",
        "E-SAGA-001",
        0,
    )
    assert "a person must look" in row["failure_reason"]
    assert sweeps.reap_once(engine) == []
    assert execute(engine, settings, run_id) == runner.Outcome.NOT_CLAIMED


def test_a_compensation_that_halts_escalates(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-undo-halts")

    assert execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("WAITING_APPROVAL", "MANUAL_INTERVENTION")
    assert "compensation of a" in row["failure_reason"]


def test_two_timer_sweeps_racing_fire_each_due_timer_exactly_once(engine, project, settings):
    run_ids = test_runs.admit_many(engine, project["project_id"], 520)
    with engine.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version) "
                "SELECT run_id::text || '-retry', run_id, 'retry', now() - interval '1 second', "
                "version FROM awooop_run_state"
            )
        )
    small = settings.__class__(**{**settings.__dict__, "timer_batch_size": 20})
    fired: list[list] = []
    start = threading.Barrier(2)

    def sweep() -> None:
        start.wait()
        fired.append(fire_timers(engine, small))

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    timer_runs = [t.run_id for batch in fired for t in batch]
    assert sorted(timer_runs) == sorted(run_ids)  # every timer once, none twice
    assert all(len(batch) > 0 for batch in fired)  # both sweeps took part
    with engine.connect() as conn:
        states = conn.execute(text("SELECT state, count(*) FROM awooop_timer GROUP BY 1")).all()
    assert [tuple(s) for s in states] == [("FIRED", 520)]


def test_a_timer_for_a_run_that_moved_on_is_skipped(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version) "
                "VALUES ('stale', :r, 'retry', now(), 99)"
            ),
            {"r": run_id},
        )

    assert fire_timers(engine, settings) == []  # nothing to nudge

    with engine.connect() as conn:
        state = conn.execute(
            text("SELECT state FROM awooop_timer WHERE timer_id = 'stale'")
        ).scalar_one()
    assert state == "SKIPPED"


def test_a_run_finishes_on_the_workflow_version_it_started_with(engine, project, settings):
    def step(ctx):
        return {"version": 1}

    def other(ctx):
        return {"version": 2}

    registry.register(Workflow("test-versioned", 1, [Step("only", step)]))
    run_id = test_runs.admit(engine, project["project_id"], "test-versioned")
    registry.register(Workflow("test-versioned", 2, [Step("first", other), Step("second", other)]))

    assert execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    row = db.run(engine, run_id)
    assert (row["workflow_version"], row["output"]) == (1, {"version": 1})
    assert [e["step"] for e in row["saga_steps"]] == ["only"]


def test_runs_on_a_definition_this_worker_lacks_are_reported_at_start_up(
    engine, project, settings, caplog
):
    from awooop.engine import startup

    known = test_runs.admit(engine, project["project_id"], "noop-3")
    lacking = test_runs.admit(engine, project["project_id"], "noop-3")
    with engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET workflow_version = 7 WHERE run_id = :r"),
            {"r": lacking},
        )

    logger = logging.getLogger("awooop.engine.startup")
    logger.addHandler(caplog.handler)  # the awooop loggers do not propagate to the root
    try:
        missing = startup.missing_definitions(engine)
    finally:
        logger.removeHandler(caplog.handler)

    assert missing == [
        {
            "workflow": "noop-3",
            "version": 7,
            "digest": db.run(engine, lacking)["workflow_digest"],
            "runs": 1,
        }
    ]
    assert db.run(engine, known)["status"] == "PENDING"  # nothing is failed
    assert "workflow_definition_missing" in [getattr(r, "action", "") for r in caplog.records]


@pytest.mark.parametrize("returns", ["object", "nan", "nul"])
def test_a_step_whose_return_value_is_not_json_stops_without_a_retry(
    engine, project, settings, returns
):
    run_id = test_runs.admit(engine, project["project_id"], "test-not-json", {"returns": returns})

    # The handler ran (its effect happened): it is not retried, the saga turns back
    assert execute(engine, settings, run_id) == runner.Outcome.FAILED

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "FAILED",
        "COMPENSATED",
        "E-STEP-004",
    )
    assert wf.CALLS[str(run_id)] == ["do:a", "do:odd", "undo:a"]
    odd = [e for e in row["saga_steps"] if e.get("step") == "odd"]
    assert odd[0]["retryable"] is False
    assert "cannot be stored as JSON" in odd[0]["error"]


def test_a_step_output_is_json_encoded_once_for_its_record_and_the_runs_output(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-encoded-once")
    wf.CountedEncodings.encodings = 0

    assert execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    # Encoded when checked, then written as that text: by the first step's record, and by
    # the finish, which holds the last step's outcome and the run's output.
    assert wf.CountedEncodings.encodings == 2
    row = db.run(engine, run_id)
    outputs = {e["step"]: e["output"] for e in row["saga_steps"] if "output" in e}
    expected = {"text": "caf\u00e9 " * 200}
    assert outputs == {"first": {"step": "first", **expected}, "last": {"step": "last", **expected}}
    assert row["output"] == {"step": "last", **expected}


def test_a_step_error_holding_text_jsonb_cannot_store_is_recorded_as_a_failure(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-nul-error")

    # The exception is a transient failure like any other: recorded, then retried
    assert execute(engine, settings, run_id) == runner.Outcome.RETRY_SCHEDULED

    row = db.run(engine, run_id)
    (odd,) = [e for e in row["saga_steps"] if e.get("step") == "odd"]
    assert odd["status"] == "FAILED"
    assert odd["error"].startswith("RuntimeError: the device answered a")
    assert "\u0000" not in odd["error"]
