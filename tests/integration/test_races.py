"""Two actors writing one run at once: a worker mid-step against an operator's
cancel or the run deadline, an approval decision or expiry against a cancel, the timer sweep
against pause / resume. Each interleaving is forced: one side is held on a gate or a row
lock while the other commits."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from awooop import db as awooop_db
from awooop.engine import runner, sweeps, tools
from awooop.store import approvals, operations, timers
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf

# The step ends with a known outcome: the intent turns the saga back at once.
OUTCOMES = ["succeed", "complete", "fail", "reject", "approval"]
# The step's effect is left in doubt: the intent settles it first.
IN_DOUBT = {
    # the resolver cannot tell yet: polled again later, the intent kept
    "unknown": (runner.Outcome.RETRY_SCHEDULED, "PENDING", "CANCELLING"),
    # nothing can settle it: a person decides, nothing compensated; the intent kept
    "unknown-no-resolver": (runner.Outcome.ESCALATED, "WAITING_APPROVAL", "MANUAL_INTERVENTION"),
    "halt": (runner.Outcome.ESCALATED, "WAITING_APPROVAL", "MANUAL_INTERVENTION"),
    # the call went out: wait for its result (or timeout), the intent kept
    "tool": (runner.Outcome.WAITING_TOOL, "WAITING_TOOL", "CANCELLING"),
}
assert sorted([*OUTCOMES, *IN_DOUBT]) == sorted(wf.HELD_STEPS)


def _cancel(engine, settings, project, run_id) -> None:
    assert test_runs.operate(engine, settings, project, "cancel", run_id).applied


def _fire_deadline(engine, settings, run_id) -> None:
    waiting.fire_when_due(engine, settings, run_id, "deadline")
    assert db.run(engine, run_id)["saga_status"] == "CANCELLING"


@pytest.mark.parametrize("intent", ["cancel", "deadline"])
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_an_intent_recorded_while_a_step_runs_survives_however_the_step_ends(
    engine, project, settings, outcome, intent
):
    # Given a worker inside step "hold", held on a gate
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    name = f"test-held-{outcome}" + ("-deadline" if intent == "deadline" else "")
    run_id = test_runs.admit(
        engine, project["project_id"], name, {"gate": gate, "outcome": outcome}
    )
    worker, result = test_runs.execute_in_thread(engine, settings, run_id)
    # (inside the handler: the step boundary before it, where an intent is seen, is passed)
    inside = "ask:hold" if outcome == "approval" else "do:hold"
    waiting.until(lambda: inside in wf.CALLS.get(str(run_id), []), what="inside step hold")

    # When the operator cancels (or the deadline passes) and then the step ends
    if intent == "cancel":
        _cancel(engine, settings, project, run_id)
    else:
        _fire_deadline(engine, settings, run_id)
    wf.GATES[gate].set()
    worker.join(timeout=20)

    # Then the worker turned back in the same segment: compensated, ended by the intent
    row = db.run(engine, run_id)
    expected = ("CANCELLED", "E-SAGA-002") if intent == "cancel" else ("FAILED", "E-SAGA-003")
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        expected[0],
        "COMPENSATED",
        expected[1],
    )
    assert result == [runner.Outcome.CANCELLED if intent == "cancel" else runner.Outcome.FAILED]
    calls = wf.CALLS[str(run_id)]
    assert "undo:a" in calls and "do:c" not in calls
    assert ("undo:hold" in calls) == (outcome in ("succeed", "complete"))
    # and the step's own outcome is in the journal, before the plan the intent froze
    hold = [e for e in row["saga_steps"] if e.get("step") == "hold" and e["phase"] == "forward"]
    assert len(hold) == 1
    assert db.count(engine, "awooop_approval", "run_id = :r", r=run_id) == 0


@pytest.mark.parametrize("intent", ["cancel", "deadline"])
@pytest.mark.parametrize("outcome", list(IN_DOUBT))
def test_an_intent_recorded_while_a_step_runs_settles_a_step_left_in_doubt_first(
    engine, project, settings, outcome, intent
):
    # Given a worker inside step "hold", held on a gate
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    name = f"test-held-{outcome}" + ("-deadline" if intent == "deadline" else "")
    run_id = test_runs.admit(
        engine, project["project_id"], name, {"gate": gate, "outcome": outcome}
    )
    worker, result = test_runs.execute_in_thread(engine, settings, run_id)
    waiting.until(lambda: db.run(engine, run_id)["current_step"] == "hold", what="step hold")

    # When the operator cancels (or the deadline passes) and then the step ends in doubt
    if intent == "cancel":
        _cancel(engine, settings, project, run_id)
    else:
        _fire_deadline(engine, settings, run_id)
    wf.GATES[gate].set()
    worker.join(timeout=20)

    # Then nothing is compensated yet: the step's outcome is being settled, the intent kept
    expected, status, saga_status = IN_DOUBT[outcome]
    cause = "E-SAGA-002" if intent == "cancel" else "E-SAGA-003"
    row = db.run(engine, run_id)
    assert result == [expected]
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        status,
        saga_status,
        cause,
    )
    calls = wf.CALLS[str(run_id)]
    assert calls == ["do:a", "do:hold"]  # nothing undone, nothing run again
    assert not [e for e in row["saga_steps"] if e["phase"] == "plan"]
    if outcome != "tool":
        return
    # and once the tool's result says the call happened, it is undone with the rest
    delivered = tools.deliver_result(
        engine,
        project["project_id"],
        run_id,
        event_id="evt-1",
        step="hold",
        status="succeeded",
        output={},
    )
    assert delivered.delivery.accepted
    runner.execute(engine, settings, run_id)
    row = db.run(engine, run_id)
    assert (row["saga_status"], row["failure_code"]) == ("COMPENSATED", cause)
    assert wf.CALLS[str(run_id)] == ["do:a", "do:hold", "undo:hold", "undo:a"]


def test_the_test_database_refuses_a_transition_the_state_machine_does_not_list(
    engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    with pytest.raises(DBAPIError, match="illegal run transition"), engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET status = 'RUNNING' WHERE run_id = :r"),
            {"r": run_id},
        )
    with pytest.raises(DBAPIError, match="illegal run transition"), engine.connect() as conn:
        conn.execute(
            text("UPDATE awooop_run_state SET saga_status = 'RUNNING' WHERE run_id = :r"),
            {"r": run_id},
        )
    assert db.run(engine, run_id)["status"] == "COMPLETED"


def _waiting_for_approval(engine, settings, project) -> tuple[uuid.UUID, uuid.UUID]:
    run_id = test_runs.admit(engine, project["project_id"], "test-approval")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL
    (approval,) = db.rows(engine, "SELECT * FROM awooop_approval WHERE run_id = :r", r=run_id)
    return run_id, approval["approval_id"]


def _decide(engine, project, approval_id) -> Any:
    with engine.connect() as conn:
        return approvals.decide(
            conn,
            project["project_id"],
            approval_id,
            "approve",
            actor="bob",
            via="api",
            comment=None,
            messages=[],
        )


def _expire(engine, run_id) -> Any:
    (timer,) = db.rows(
        engine,
        "SELECT * FROM awooop_timer WHERE run_id = :r AND kind = 'approval_expiry'",
        r=run_id,
    )
    fired = timers.FiredTimer(
        timer["timer_id"], run_id, "approval_expiry", True, 0.0, timer["step"], timer["attempt"]
    )
    with engine.connect() as conn:
        return approvals.expire(conn, fired)


@pytest.mark.parametrize("decision", ["decide", "expire"])
def test_a_cancel_committed_while_an_approval_is_decided_wins(engine, project, settings, decision):
    run_id, approval_id = _waiting_for_approval(engine, settings, project)
    result: list[Any] = []

    # Given an operator's cancel holding the run row, not yet committed
    with awooop_db.transaction(engine) as tx:
        applied = operations.apply(
            tx, "cancel", project["project_id"], run_id, uuid.uuid4().hex, "alice", "test"
        )
        assert applied.applied
        # When the decision (or the expiry) arrives and waits for the row
        act = (
            (lambda: _decide(engine, project, approval_id))
            if decision == "decide"
            else (lambda: _expire(engine, run_id))
        )
        other = threading.Thread(target=lambda: result.append(act()))
        other.start()
        waiting.until(
            lambda: waiting.blocked_on_lock(engine, "awooop_approval"), what="the decision waits"
        )
    other.join(timeout=10)

    # Then the decision found the run no longer waiting: nothing decided, nothing journaled
    assert result == [None] if decision == "decide" else result == [False]
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("RESUMED", "CANCELLING")
    assert not [e for e in row["saga_steps"] if e["phase"] == "approval"]
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED


def test_the_timer_sweep_and_an_operator_never_deadlock(engine, project, settings):
    # Given 500 due deadline timers, one of them on a run an operator is pausing
    run_ids = [
        test_runs.admit(engine, project["project_id"], "test-held-succeed-deadline", {})
        for _ in range(5)
    ]
    with engine.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version)"
                " SELECT r || ':extra:' || n, r, 'deadline', now() - interval '1 s', -1"
                " FROM unnest(CAST(:runs AS uuid[])) r, generate_series(1, 99) n"
            ),
            {"runs": [str(r) for r in run_ids]},
        )
    fired: list[Any] = []
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            fired.extend(sweeps.fire_due_timers_once(engine, settings))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    with awooop_db.transaction(engine) as tx:
        # The operator holds the run row (as pause does, before it re-arms the run's timers)
        tx.execute(
            text("SELECT 1 FROM awooop_run_state WHERE run_id = :r FOR UPDATE"), {"r": run_ids[0]}
        )
        sweeper = threading.Thread(target=sweep)
        sweeper.start()
        # When the sweep runs meanwhile, and then the operator touches the run's timers
        sweeper.join(timeout=5)
        tx.execute(
            text(
                "UPDATE awooop_timer SET expected_version = -1 WHERE run_id = :r"
                " AND state = 'PENDING'"
            ),
            {"r": run_ids[0]},
        )
    sweeper.join(timeout=10)

    # Then neither waited for the other: the sweep skipped the held run's timers this pass
    assert not errors
    assert not sweeper.is_alive()
    assert {t.run_id for t in fired} == set(run_ids[1:])
    later = sweeps.fire_due_timers_once(engine, settings)
    assert {t.run_id for t in later} == {run_ids[0]}


def test_two_sweeps_at_once_fire_each_due_timer_once(engine, project, settings):
    # Given 40 due retry timers on eight runs, those of the first three runs due first (the
    # situation two beats create: the sweep is sent twice and two maintenance workers run it
    # at the same moment)
    run_ids = [
        test_runs.admit(engine, project["project_id"], "test-held-succeed-deadline", {})
        for _ in range(8)
    ]
    with engine.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO awooop_timer (timer_id, run_id, kind, due_at, expected_version)"
                " SELECT r || ':twice:' || n, r, 'retry',"
                "        now() - CASE WHEN i <= 3 THEN interval '2 s' ELSE interval '1 s' END, -1"
                " FROM unnest(CAST(:runs AS uuid[])) WITH ORDINALITY AS u(r, i),"
                "      generate_series(1, 5) n"
            ),
            {"runs": [str(r) for r in run_ids]},
        )
        conn.commit()
    timer_ids = {f"{r}:twice:{n}" for r in run_ids for n in range(1, 6)}
    fired_by_second: list[Any] = []
    errors: list[BaseException] = []

    def second_sweep() -> None:
        try:
            fired_by_second.extend(sweeps.fire_due_timers_once(engine, settings))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    with awooop_db.transaction(engine) as first:
        # When the first sweep has claimed a batch (timers of the first three runs, and so
        # those runs' rows) and not yet committed
        held = timers.fire_due(first, "first-sweep", 12)
        assert {t.run_id for t in held} == set(run_ids[:3])
        # and the second sweep runs to its end meanwhile
        sweeper = threading.Thread(target=second_sweep)
        sweeper.start()
        sweeper.join(timeout=10)
        assert not sweeper.is_alive(), "the second sweep waited for the first one's locks"
    # and a third pass comes after the first committed
    fired_by_third = sweeps.fire_due_timers_once(engine, settings)

    # Then the sweeps took disjoint timers, and together every one of them, each once
    assert not errors
    first_ids = {t.timer_id for t in held}
    second_ids = {t.timer_id for t in fired_by_second}
    third_ids = {t.timer_id for t in fired_by_third}
    # (the second skipped every timer of a run the first held, and fired the others)
    assert {t.run_id for t in fired_by_second} == set(run_ids[3:])
    assert not first_ids & second_ids and not third_ids & (first_ids | second_ids)
    assert first_ids | second_ids | third_ids == timer_ids
    states = db.rows(
        engine,
        "SELECT timer_id, state, claimed_by FROM awooop_timer WHERE timer_id LIKE '%:twice:%'",
    )
    assert {r["state"] for r in states} == {"FIRED"}
    assert {r["timer_id"] for r in states if r["claimed_by"] == "first-sweep"} == first_ids
