"""The finisher: a run's last write committed after the task returned, on the process's
finisher thread. The run is COMPLETED only once that write has committed; an intent that
lands between the task's return and the finish keeps the last step's outcome and hands the
run back, and the next segment acts on it. Each interleaving is forced: the finisher's thread
is held on a gate while the other side commits."""

from __future__ import annotations

import threading
import uuid

import pytest

from awooop.engine import runner
from awooop.engine.finisher import Finisher
from tests.support import db, waiting
from tests.support import runs as test_runs


class Recorded:
    """A finisher whose thread can be held before the next finish, and what it reported."""

    def __init__(self, engine) -> None:
        self.ended: list[tuple[uuid.UUID, runner.Outcome]] = []
        self.finisher = Finisher(
            engine, lambda run_id, outcome: self.ended.append((run_id, outcome))
        )
        self.gate = threading.Event()
        self.holding = threading.Event()

        def hold(_conn) -> None:
            self.holding.set()
            assert self.gate.wait(30), "the test never opened the gate"

        self.finisher.submit(uuid.uuid4(), hold)
        assert self.holding.wait(10)

    def release(self) -> None:
        self.gate.set()
        assert self.finisher.drain(30), "the finishes did not end"


@pytest.fixture
def held_finisher(engine):
    recorded = Recorded(engine)
    yield recorded
    recorded.gate.set()


def test_a_run_is_completed_only_once_the_finisher_committed_its_last_write(
    engine, project, settings, held_finisher
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")

    outcome = runner.execute(engine, settings, run_id, finisher=held_finisher.finisher)

    # The task has returned; its last step ran, but nothing says COMPLETED yet.
    assert outcome is runner.Outcome.FINISHING
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("RUNNING", "RUNNING")
    assert [e["step"] for e in row["saga_steps"]] == ["one", "two"]

    held_finisher.release()

    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("COMPLETED", "COMPLETED")
    assert [e["step"] for e in row["saga_steps"]] == ["one", "two", "three"]
    assert row["lease_until"] is None and row["finished_at"] is not None
    assert held_finisher.ended[-1] == (run_id, runner.Outcome.COMPLETED)


def _cancel(engine, settings, project, run_id) -> None:
    assert test_runs.operate(engine, settings, project, "cancel", run_id).applied


def _fire_deadline(engine, settings, project, run_id) -> None:
    waiting.fire_when_due(engine, settings, run_id, "deadline")


@pytest.mark.parametrize(
    ("workflow", "intent", "ended", "failure_code"),
    [
        ("noop-3", _cancel, runner.Outcome.CANCELLED, "E-SAGA-002"),
        ("test-deadline-noop", _fire_deadline, runner.Outcome.FAILED, "E-SAGA-003"),
    ],
)
def test_an_intent_that_lands_before_the_finish_keeps_the_step_and_hands_the_run_back(
    engine, project, settings, held_finisher, workflow, intent, ended, failure_code
):
    run_id = test_runs.admit(engine, project["project_id"], workflow)
    assert (
        runner.execute(engine, settings, run_id, finisher=held_finisher.finisher)
        is runner.Outcome.FINISHING
    )

    # An operator's cancel, or the run's deadline, commits while the finish waits.
    intent(engine, settings, project, run_id)
    assert db.run(engine, run_id)["saga_status"] == "CANCELLING"
    held_finisher.release()

    # The finish matched no row: the last step's outcome is kept, the run handed back.
    assert held_finisher.ended[-1] == (run_id, runner.Outcome.HANDED_BACK)
    row = db.run(engine, run_id)
    forward = [(e["step"], e["status"]) for e in row["saga_steps"] if e.get("phase") == "forward"]
    assert forward[-1] == ("three", "SUCCEEDED")
    assert row["status"] != "COMPLETED" and row["lease_until"] is None

    # The next segment acts on the intent; step three does not run again.
    assert runner.execute(engine, settings, run_id) is ended
    row = db.run(engine, run_id)
    assert (row["saga_status"], row["failure_code"]) == ("COMPENSATED", failure_code)
    three = [
        e for e in row["saga_steps"] if (e.get("step"), e.get("phase")) == ("three", "forward")
    ]
    assert len(three) == 1


def test_a_pause_that_lands_before_the_finish_does_not_stop_it(
    engine, project, settings, held_finisher
):
    """A pause holds a run at its next step boundary; after the last step there is none."""
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    runner.execute(engine, settings, run_id, finisher=held_finisher.finisher)

    assert test_runs.operate(engine, settings, project, "pause", run_id).applied
    held_finisher.release()

    assert held_finisher.ended[-1] == (run_id, runner.Outcome.COMPLETED)
    assert db.run(engine, run_id)["status"] == "COMPLETED"
