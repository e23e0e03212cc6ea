"""A worker recognises its own committed write by the identity the write carries, never by
the journal's length; a miss while its lease is still held hands the run back
at once. Each interleaving is forced: the other actor commits from inside the worker's
statement hook, between the worker's statement and its (lost) reply."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg2
import pytest
from sqlalchemy import Engine, event, exc, text

from awooop.engine import runner
from awooop.engine import tools as engine_tools
from awooop.store import approvals, reaper
from tests.support import db, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


@pytest.fixture
def quick_retries(settings):
    return dataclasses.replace(settings, write_retry_base_seconds=0.01, write_retries=3)


def _meanwhile(
    engine: Engine, needle: str, act: Callable[[], None], when: str, lose_reply: bool = True
) -> list[int]:
    """The first statement containing ``needle``: ``act`` runs (another actor commits) just
    ``before`` it runs or just ``after`` it committed; then, when ``lose_reply``, the
    statement fails like a connection the server closed."""
    hits = [0]

    def hook(conn, cursor, statement, parameters, context, executemany):
        if needle in statement and not hits[0]:
            hits[0] += 1
            act()
            if lose_reply:
                raise exc.OperationalError(
                    statement,
                    parameters,
                    psycopg2.OperationalError("server closed the connection unexpectedly"),
                    connection_invalidated=True,
                )

    event.listen(engine, f"{when}_cursor_execute", hook)
    return hits


def _held_at_step(engine, settings, project, outcome: str = "succeed") -> tuple[Any, ...]:
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(
        engine, project["project_id"], f"test-held-{outcome}", {"gate": gate, "outcome": outcome}
    )
    worker, result = test_runs.execute_in_thread(engine, settings, run_id)
    waiting.until(lambda: db.run(engine, run_id)["current_step"] == "hold", what="step hold")
    return run_id, gate, worker, result


def _reap_now(engine: Engine, run_id: uuid.UUID) -> None:
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET lease_until = now() - interval '1 second'"
                " WHERE run_id = :r"
            ),
            {"r": run_id},
        )
        assert [r.run_id for r in reaper.reap(conn, "test-reaper")] == [run_id]


def test_a_pause_release_refused_after_the_reaper_requeued_the_run_is_not_read_as_landed(
    engine, project, quick_retries
):
    # Given a worker inside a step of a run an operator pauses
    run_id, gate, worker, result = _held_at_step(engine, quick_retries, project)
    assert test_runs.operate(engine, quick_retries, project, "pause", run_id).applied
    # When the reaper requeues the run just before the worker's pause-release, whose
    # connection then fails (the release never ran)
    hits = _meanwhile(
        engine, "AND control_state = 'PAUSED'", lambda: _reap_now(engine, run_id), "before"
    )
    wf.GATES[gate].set()
    worker.join(timeout=20)

    # Then the worker does not take the reaper's requeue for its own release
    assert hits == [1]
    assert result == [runner.Outcome.LEASE_LOST]
    row = db.run(engine, run_id)
    assert (row["status"], row["control_state"], row["worker_id"]) == ("PENDING", "PAUSED", None)
    triggers = [e["trigger_id"] for e in db.events(engine, run_id)]
    assert not [t for t in triggers if t and t.startswith("pause:")]
    assert any(t and t.startswith("reap:") for t in triggers)


def _tool_result(engine, project, run_id) -> None:
    engine_tools.deliver_result(
        engine,
        project["project_id"],
        run_id,
        event_id=uuid.uuid4().hex,
        step="diagnose",
        status="succeeded",
        output={"healthy": True},
    )


def _approve(engine, project, run_id) -> None:
    (approval,) = db.rows(
        engine, "SELECT approval_id FROM awooop_approval WHERE run_id = :r", r=run_id
    )
    with engine.connect() as conn:
        decided = approvals.decide(
            conn,
            project["project_id"],
            approval["approval_id"],
            "approve",
            actor="bob",
            via="api",
            comment=None,
            messages=[],
        )
    assert decided is not None


def _retry_resolution(engine, settings, project, run_id) -> None:
    assert test_runs.operate(engine, settings, project, "retry_resolution", run_id).applied


# (workflow, needle of the segment-ending statement, the worker's outcome)
_ENDINGS = {
    "wait_approval": ("test-approval", "INSERT INTO awooop_approval", "waiting_approval"),
    "escalate": ("test-no-resolver", "INSERT INTO awooop_approval", "escalated"),
    "wait_tool": ("test-tool", "'tool_timeout', %(step)s", "waiting_tool"),
    "retry_later": ("test-tool-timeout", "'retry', %(step)s", "retry_scheduled"),
}


@pytest.mark.parametrize("ending", list(_ENDINGS))
def test_a_committed_segment_end_whose_reply_was_lost_is_read_as_landed_after_an_append(
    engine, project, quick_retries, ending
):
    workflow, needle, outcome = _ENDINGS[ending]
    telegram = {"message": {"chat": {"id": 4242}, "text": "restart db-1"}}
    run_id = test_runs.admit(engine, project["project_id"], workflow, telegram, channel="telegram")
    if ending == "retry_later":
        # the tool call timed out: the next segment schedules its retry
        assert runner.execute(engine, quick_retries, run_id) == runner.Outcome.WAITING_TOOL
        waiting.fire_when_due(engine, quick_retries, run_id, "tool_timeout")
    append = {
        "wait_approval": lambda: _approve(engine, project, run_id),
        "escalate": lambda: _retry_resolution(engine, quick_retries, project, run_id),
        "wait_tool": lambda: _tool_result(engine, project, run_id),
        "retry_later": lambda: _tool_result(engine, project, run_id),
    }[ending]
    length_before = [0]

    def then_append() -> None:
        length_before[0] = len(db.run(engine, run_id)["saga_steps"])
        append()

    # When the segment's last statement commits, its reply is lost, and before the worker
    # asks again a decision, an operator's reset or a tool result appends to the journal
    hits = _meanwhile(engine, needle, then_append, "after")
    notified: list[uuid.UUID] = []
    got = runner.execute(engine, quick_retries, run_id, notify=notified.extend)

    # Then the worker knows its write landed: the segment ended as it decided
    assert hits == [1]
    assert len(db.run(engine, run_id)["saga_steps"]) == length_before[0] + 1
    assert got == runner.Outcome(outcome)
    if ending == "wait_approval":  # and the prompt it queued is sent now
        prompts = db.rows(
            engine,
            "SELECT message_id FROM awooop_outbox"
            " WHERE run_id = :r AND purpose = 'approval_prompt'",
            r=run_id,
        )
        assert prompts and {p["message_id"] for p in prompts} <= set(notified)


def test_a_resume_recorded_just_before_the_pause_release_lets_the_segment_go_on(
    engine, project, settings
):
    # Given a worker inside a step of a run an operator pauses
    run_id, gate, worker, result = _held_at_step(engine, settings, project)
    assert test_runs.operate(engine, settings, project, "pause", run_id).applied

    # When the operator resumes it just before the worker's pause-release
    def resume() -> None:
        assert test_runs.operate(engine, settings, project, "resume", run_id).applied

    hits = _meanwhile(engine, "AND control_state = 'PAUSED'", resume, "before", lose_reply=False)
    wf.GATES[gate].set()
    worker.join(timeout=20)

    # Then the worker reads the resume as an intent, not as a lost lease, and goes on
    assert hits == [1]
    assert result == [runner.Outcome.COMPLETED]
    assert db.run(engine, run_id)["status"] == "COMPLETED"


def test_a_miss_no_intent_explains_while_the_lease_is_held_hands_the_run_back_at_once(
    engine, project, settings
):
    # Given a worker inside a step, and the journal changed under it by no intent
    run_id, gate, worker, result = _held_at_step(engine, settings, project)
    with engine.connect() as conn:
        conn.execute(
            text(
                "UPDATE awooop_run_state SET saga_steps = saga_steps"
                " || jsonb_build_array(jsonb_build_object('phase', 'note')) WHERE run_id = :r"
            ),
            {"r": run_id},
        )
    # When the step ends and its record matches no row
    wf.GATES[gate].set()
    worker.join(timeout=20)

    # Then the worker stops, and the run is claimable at once with its attempt refunded
    assert result == [runner.Outcome.LEASE_LOST]
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_until"]) == ("PENDING", None, None)
    assert row["attempt_count"] == 0
    assert [e for e in db.events(engine, run_id) if (e["trigger_id"] or "").startswith("release:")]


def test_a_worker_whose_belief_in_its_lease_expired_hands_the_run_back_at_once(
    engine, project, settings
):
    # Given a step during which the worker's belief in its lease expires (the keeper could
    # not reach the database for too long), while the lease row is still the worker's
    run_id = test_runs.admit(engine, project["project_id"], "test-belief-expires", {})

    # When the step ends
    assert runner.execute(engine, settings, run_id) == runner.Outcome.LEASE_LOST

    # Then its result is not recorded, and the run is claimable at once, attempt refunded
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_until"]) == ("PENDING", None, None)
    assert row["attempt_count"] == 0
    assert [e["step"] for e in row["saga_steps"]] == ["first"]
    assert runner.execute(engine, settings, run_id) == runner.Outcome.LEASE_LOST
    assert wf.CALLS[str(run_id)] == ["expire:act", "expire:act"]
