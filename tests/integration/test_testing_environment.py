"""The awooop_env fixture (awooop.testing's pytest plugin) on a real PostgreSQL, and the
simulator held against it: the same workflow, the same outcomes, the same journal."""

from __future__ import annotations

from typing import Any

import pytest

from awooop.domain import saga
from awooop.domain.workflow import (
    Reject,
    RetryPolicy,
    Step,
    StepContext,
    Workflow,
    sleep,
    wait_for_signal,
)
from awooop.testing import Simulator
from awooop.testing.environment import AwooopEnv
from awooop.workflows import builtin, late, operations
from tests.unit.test_builtin_workflows_simulated import EVENTS


def _act(ctx: StepContext) -> dict[str, Any]:
    if ctx.input["event"].get("reject") == ctx.step:
        raise Reject("locked")
    if ctx.input["event"].get("flaky") == ctx.step and ctx.attempt == 1:
        raise ConnectionError("try again")
    return {"done": ctx.step}


def _undo(ctx: StepContext) -> dict[str, Any]:
    return {"undone": ctx.step}


def _dispatch(ctx: StepContext) -> dict[str, Any]:
    return {"correlation": ctx.effect_id}


RESTART = Workflow(
    "testing-restart",
    1,
    [
        Step("stop", _act, compensate=_undo),
        Step("restart", _act, compensate=_undo, retry=RetryPolicy(max_retries=1, base_delay=0.1)),
        Step("report", _act),
    ],
)
WAITS = Workflow(
    "testing-waits",
    1,
    [
        Step("stop", _act, compensate=_undo),
        sleep("nap", 0.2),
        wait_for_signal("confirm", "resolved", timeout=60),
        Step("report", _act),
    ],
)
TOOL = Workflow(
    "testing-tool", 1, [Step("collect", _dispatch, tool_timeout=60), Step("report", _act)]
)


def shape(journal: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """What the simulator's trace() gives, from a journal read from the database."""
    return [(e.get("step") or "", e["phase"], e.get("status") or "") for e in journal]


def test_an_injected_rejection_gives_the_simulator_and_the_runner_the_same_journal(
    awooop_env: AwooopEnv,
) -> None:
    sim = Simulator(RESTART, {})
    sim.outcome("restart", reject="locked")
    sim.run()

    run_id = awooop_env.start(RESTART, {"reject": "restart"})
    row = awooop_env.drive(run_id)

    assert (
        (row["status"], row["failure_code"])
        == (sim.status, sim.failure_code)
        == (
            "FAILED",
            saga.STEP_REJECTED,
        )
    )
    assert shape(row["saga_steps"]) == sim.trace()
    # The same ids the handlers got: effect ids by run, step and phase.
    effect_ids = [e["effect_id"] for e in row["saga_steps"] if "effect_id" in e]
    assert effect_ids == [
        f"{run_id}:stop:forward",
        f"{run_id}:restart:forward",
        f"{run_id}:stop:compensate",
    ]


def test_a_retried_failure_gives_both_the_same_journal(awooop_env: AwooopEnv) -> None:
    sim = Simulator(RESTART, {})
    sim.outcome("restart", fail=ConnectionError("try again"))
    sim.run()
    sim.advance(1)
    sim.run()

    run_id = awooop_env.start(RESTART, {"flaky": "restart"})
    row = awooop_env.drive(run_id, wait_up_to=2)

    assert row["status"] == sim.status == "COMPLETED"
    assert shape(row["saga_steps"]) == sim.trace()


def test_a_sleep_and_a_signal_give_both_the_same_journal(awooop_env: AwooopEnv) -> None:
    sim = Simulator(WAITS, {})
    sim.run()
    sim.advance(0.2).run()
    sim.signal("resolved", {"by": "bob"})
    sim.run()

    run_id = awooop_env.start(WAITS, {})
    row = awooop_env.drive(run_id, wait_up_to=2)  # the sleep, then the wait for the signal
    assert (row["status"], row["saga_steps"][-1].get("signal")) == ("PENDING", "resolved")
    assert awooop_env.signal(run_id, "resolved", {"by": "bob"}).outcome == "delivered"
    row = awooop_env.drive(run_id)

    assert row["status"] == sim.status == "COMPLETED"
    assert shape(row["saga_steps"]) == sim.trace()
    assert row["output"] == sim.output


def test_a_cancel_while_waiting_gives_both_the_same_journal(awooop_env: AwooopEnv) -> None:
    sim = Simulator(WAITS, {})
    sim.run()
    sim.cancel()
    sim.run()

    run_id = awooop_env.start(WAITS, {})
    awooop_env.drive(run_id)
    awooop_env.cancel(run_id)
    row = awooop_env.drive(run_id)

    assert row["status"] == sim.status == "CANCELLED"
    assert shape(row["saga_steps"]) == sim.trace()


def test_a_tool_result_gives_both_the_same_journal(awooop_env: AwooopEnv) -> None:
    sim = Simulator(TOOL, {})
    sim.run()
    sim.tool_result("collect", {"cpu": 99})
    sim.run()

    run_id = awooop_env.start(TOOL, {})
    assert awooop_env.drive(run_id)["status"] == "WAITING_TOOL"
    assert awooop_env.tool_result(run_id, "collect", {"cpu": 99}).delivery.accepted
    row = awooop_env.drive(run_id)

    assert row["status"] == sim.status == "COMPLETED"
    assert shape(row["saga_steps"]) == sim.trace()


@pytest.mark.parametrize("channel", sorted(EVENTS))
def test_each_demo_workflow_runs_on_postgresql_as_in_the_simulator(
    awooop_env: AwooopEnv, channel: str
) -> None:
    workflow = builtin.DEMO_WORKFLOWS[channel]
    sim = Simulator(workflow, EVENTS[channel], channel=channel)
    sim.run()

    run_id = awooop_env.start(workflow, EVENTS[channel], channel=channel)
    row = awooop_env.drive(run_id)

    assert row["status"] == "COMPLETED"
    assert row["output"] == sim.output


def test_noop_completes_on_postgresql(awooop_env: AwooopEnv) -> None:
    row = awooop_env.drive(awooop_env.start(builtin.NOOP_3))

    sim = Simulator(builtin.NOOP_3)
    sim.run()

    assert row["status"] == "COMPLETED"
    assert shape(row["saga_steps"]) == sim.trace()


def test_chatops_refuses_a_message_that_is_not_a_command(awooop_env: AwooopEnv) -> None:
    event = {"message": {"text": "hello", "chat": {"id": 1}}}
    sim = Simulator(operations.CHATOPS, event, channel="telegram")
    sim.run()

    row = awooop_env.drive(awooop_env.start(operations.CHATOPS, event, channel="telegram"))

    assert (row["status"], row["failure_code"]) == ("FAILED", saga.STEP_REJECTED)
    assert shape(row["saga_steps"]) == sim.trace()


def test_chatops_waits_for_an_approval_on_postgresql(awooop_env: AwooopEnv) -> None:
    event = {"message": {"text": "/restart web", "chat": {"id": 1}}}
    row = awooop_env.drive(awooop_env.start(operations.CHATOPS, event, channel="telegram"))

    assert (row["status"], row["saga_steps"][-1]["status"]) == ("WAITING_APPROVAL", "REQUESTED")


def test_late_compensation_undoes_through_the_original_step(awooop_env: AwooopEnv) -> None:
    event = {
        "workflow": "alert-triage",
        "version": 2,
        "step": "remediate",
        "run_id": "r-1",
        "input": {"channel": "alertmanager", "event": {}, "project": {}},
        "output": {"action": "none"},
    }
    row = awooop_env.drive(awooop_env.start(late.LATE_COMPENSATION, event))

    assert (row["status"], row["output"]) == ("COMPLETED", {"rolled_back": False})
