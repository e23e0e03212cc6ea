"""awooop.testing.Simulator: every injected outcome and event, against the saga's rules."""

from __future__ import annotations

from typing import Any

import pytest

from awooop.domain import saga
from awooop.domain.workflow import (
    Approval,
    Resolver,
    RetryPolicy,
    Step,
    StepContext,
    Unknown,
    Workflow,
    sleep,
    wait_for_signal,
)
from awooop.testing import SimulatedFailure, Simulator


def _ok(ctx: StepContext) -> dict[str, Any]:
    return {"step": ctx.step}


def _undo(ctx: StepContext) -> dict[str, Any]:
    return {"undid": ctx.step}


def _unsure(ctx: StepContext) -> Any:
    raise Unknown("the call timed out")


def _prompt(ctx: StepContext) -> str:
    return "go ahead?"


def _happened(ctx: StepContext) -> dict[str, Any]:
    return {"found": True}


RESTART = Workflow(
    "sim-restart",
    1,
    [
        Step("stop", _ok, compensate=_undo),
        Step("restart", _ok, compensate=_undo, retry=RetryPolicy(max_retries=2, base_delay=5.0)),
        Step("report", _ok),
    ],
)


def statuses(sim: Simulator, step: str, phase: str = "forward") -> list[str]:
    return [s for (n, p, s) in sim.trace() if (n, p) == (step, phase)]


def test_a_run_without_injections_calls_every_handler_and_completes() -> None:
    sim = Simulator(RESTART, {"service": "web"})

    assert sim.run() == "COMPLETED"
    assert [(c.step, c.phase, c.attempt) for c in sim.calls] == [
        ("stop", "forward", 1),
        ("restart", "forward", 1),
        ("report", "forward", 1),
    ]
    assert sim.output == {"step": "report"}
    assert sim.outputs["stop"] == {"step": "stop"}


def test_handlers_get_the_runners_effect_and_command_ids() -> None:
    sim = Simulator(RESTART, {})
    sim.run()

    ctx = sim.calls[0].ctx
    assert ctx.run_id == str(sim.run_id)
    assert ctx.effect_id == f"{sim.run_id}:stop:forward"
    assert ctx.command_id == f"{sim.run_id}:stop:forward:1:1"
    assert ctx.input["event"] == {} and ctx.input["channel"] == "api"


def test_an_injected_rejection_compensates_what_succeeded_and_fails() -> None:
    sim = Simulator(RESTART, {})
    sim.outcome("restart", reject="locked")

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.STEP_REJECTED
    assert sim.compensated == ["stop"]
    assert [c.step for c in sim.calls] == ["stop", "stop"]  # forward, then its compensation
    assert statuses(sim, "restart") == ["REJECTED"]


def test_injected_failures_retry_after_the_back_off_on_the_fake_clock() -> None:
    sim = Simulator(RESTART, {}, outcomes={"restart": [{"fail": "down"}, {"fail": "down"}]})

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "retry"
    assert sim.run() == "WAITING"  # no time passed: nothing happens
    sim.advance(sim.waiting.until - sim.now)
    assert sim.run() == "WAITING"  # the second failure
    sim.advance(60)
    assert sim.run() == "COMPLETED"
    assert statuses(sim, "restart") == ["FAILED", "FAILED", "SUCCEEDED"]


def test_retries_exhausted_fail_the_run_with_its_code() -> None:
    sim = Simulator(RESTART, {})
    for _ in range(3):
        sim.outcome("restart", fail=SimulatedFailure("still down"))
    while sim.run() == "WAITING":
        sim.advance(60)

    assert sim.status == "FAILED"
    assert sim.failure_code == saga.RETRIES_EXHAUSTED
    assert sim.compensated == ["stop"]


def test_the_retry_jitter_is_the_same_for_the_same_seed() -> None:
    def first_delay(seed: int) -> float:
        sim = Simulator(RESTART, {}, seed=seed)
        sim.outcome("restart", fail="down")
        sim.run()
        assert sim.waiting is not None and sim.waiting.until is not None
        return sim.waiting.until - sim.now

    assert first_delay(7) == first_delay(7)


def test_a_halt_hands_the_run_to_a_person() -> None:
    sim = Simulator(RESTART, {})
    sim.outcome("restart", halt="needs a look")

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "person"
    assert (sim.saga_status, sim.failure_code) == ("MANUAL_INTERVENTION", saga.MANUAL_INTERVENTION)


def test_a_failing_compensation_is_retried_then_escalated() -> None:
    sim = Simulator(RESTART, {})
    sim.outcome("restart", reject="locked")
    for _ in range(5):
        sim.outcome("stop", phase="compensate", fail="cannot undo")
    while sim.run() == "WAITING" and sim.waiting and sim.waiting.kind == "retry":
        sim.advance(600)

    assert sim.waiting is not None and sim.waiting.kind == "person"
    assert statuses(sim, "stop", "compensate") == ["FAILED"] * 5


UNSURE = Workflow(
    "sim-unsure",
    1,
    [
        Step("stop", _ok, compensate=_undo),
        Step(
            "restart",
            _unsure,
            compensate=_undo,
            resolver=Resolver(_happened, budget=30.0, poll_interval=10.0),
        ),
    ],
)


def test_an_unknown_step_runs_its_real_resolver_after_the_poll_interval() -> None:
    sim = Simulator(UNSURE, {})

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "resolver"
    assert sim.saga_status == "WAITING_RESOLUTION"
    sim.advance(10)
    assert sim.run() == "COMPLETED"
    assert statuses(sim, "restart") == ["UNKNOWN", "SUCCEEDED"]
    assert sim.calls[-1].phase == "resolve"
    assert sim.calls[-1].ctx.effect_id == f"{sim.run_id}:restart:forward"


def test_a_resolver_verdict_that_it_did_not_happen_compensates() -> None:
    sim = Simulator(UNSURE, {})
    sim.verdict("restart", happened=None).verdict("restart", happened=False)
    sim.run()
    sim.advance(10).run()
    assert sim.waiting is not None and sim.waiting.kind == "resolver"
    sim.advance(10)

    assert sim.run() == "FAILED"
    assert [s for (n, p, s) in sim.trace() if p == "resolve"] == ["UNKNOWN", "REJECTED"]
    assert sim.compensated == ["stop"]


def test_a_resolver_out_of_budget_asks_a_person() -> None:
    sim = Simulator(UNSURE, {})
    for _ in range(3):
        sim.verdict("restart", happened=None)
    sim.run()
    while sim.waiting is not None and sim.waiting.kind == "resolver":
        sim.advance(10).run()

    assert sim.waiting is not None and sim.waiting.kind == "person"
    assert sim.failure_code == saga.OUTCOME_UNKNOWN


def test_a_cancel_at_a_step_turns_back_before_it_runs() -> None:
    sim = Simulator(RESTART, {}).cancel_at("restart")

    assert sim.run() == "CANCELLED"
    assert sim.failure_code == saga.CANCELLED
    assert sim.compensated == ["stop"]
    assert "restart" not in [c.step for c in sim.calls]


def test_a_cancel_waits_for_an_unknown_step_to_be_settled() -> None:
    sim = Simulator(UNSURE, {})
    sim.run()
    sim.cancel()
    sim.verdict("restart", happened=True, output={"restarted": True})

    assert sim.run() == "CANCELLED"
    assert sim.compensated == ["restart", "stop"]  # it happened, so it is undone too


APPROVE = Workflow(
    "sim-approve",
    1,
    [
        Step("stop", _ok, compensate=_undo),
        Step("approve", _prompt, approval=Approval("restart", ttl_seconds=60)),
        Step("restart", _ok),
    ],
)


def test_an_approved_step_goes_on() -> None:
    sim = Simulator(APPROVE, {})

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "approval"
    sim.approve(actor="alice")
    assert sim.run() == "COMPLETED"
    assert sim.outputs["approve"]["approved"] is True and sim.outputs["approve"]["by"] == "alice"


def test_a_rejected_approval_compensates() -> None:
    sim = Simulator(APPROVE, {})
    sim.run()
    sim.reject_approval()

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.APPROVAL_REJECTED
    assert sim.compensated == ["stop"]


def test_an_approval_nobody_decides_expires_after_its_ttl() -> None:
    sim = Simulator(APPROVE, {})
    sim.run()
    sim.advance(59)
    assert sim.run() == "WAITING"
    sim.advance(1)

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.APPROVAL_EXPIRED
    with pytest.raises(ValueError):
        sim.approve()


def _dispatch(ctx: StepContext) -> dict[str, Any]:
    return {"ticket": ctx.effect_id}


TOOL = Workflow(
    "sim-tool",
    1,
    [
        Step("collect", _dispatch, tool_timeout=30.0, retry=RetryPolicy(max_retries=1)),
        Step("report", _ok),
    ],
)


def test_a_tool_result_is_the_waiting_attempts_outcome() -> None:
    sim = Simulator(TOOL, {})

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "tool"
    assert sim.tool_result("collect", {"cpu": 99}, event_id="e1") == "accepted"
    assert sim.tool_result("collect", {"cpu": 99}, event_id="e1") == "duplicate"
    assert sim.run() == "COMPLETED"
    assert sim.outputs["collect"] == {"cpu": 99}


def test_a_missing_tool_result_times_out_and_dispatches_again() -> None:
    sim = Simulator(TOOL, {})
    sim.run()
    sim.advance(30)

    assert sim.run() == "WAITING"  # the timeout is a failure: retried after the back-off
    assert sim.waiting is not None and sim.waiting.kind == "retry"
    sim.advance(5).run()
    assert sim.waiting is not None and sim.waiting.kind == "tool"
    assert [c.attempt for c in sim.calls] == [1, 2]
    sim.tool_result("collect", status="rejected", error="no such host")
    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.STEP_REJECTED


def test_a_late_success_is_taken_for_the_retry_when_the_policy_accepts_it() -> None:
    sim = Simulator(TOOL, {})
    sim.run()
    sim.advance(30).run()  # timed out, waiting to retry

    assert sim.tool_result("collect", {"late": True}) == "accepted"
    assert sim.run() == "COMPLETED"
    assert len(sim.calls) == 2  # collect once, report once: no second dispatch


WAITS = Workflow(
    "sim-waits",
    1,
    [
        Step("stop", _ok, compensate=_undo),
        sleep("nap", 30),
        wait_for_signal("confirm", "resolved", timeout=60),
        Step("report", _ok),
    ],
)


def test_a_sleep_ends_when_the_clock_passes_it() -> None:
    sim = Simulator(WAITS, {})

    assert sim.run() == "WAITING"
    assert sim.waiting is not None and sim.waiting.kind == "sleep"
    sim.advance(29)
    assert sim.run() == "WAITING" and sim.waiting.kind == "sleep"
    sim.advance(1).run()
    assert sim.waiting is not None and sim.waiting.kind == "signal"
    assert sim.outputs["nap"] == {"slept_seconds": 30}


def test_a_signal_during_the_wait_wakes_the_run() -> None:
    sim = Simulator(WAITS, {})
    sim.run()
    sim.advance(30).run()

    assert sim.signal("resolved", {"by": "bob"}) == "delivered"
    assert sim.run() == "COMPLETED"
    assert sim.outputs["confirm"]["payload"] == {"by": "bob"}


def test_a_signal_sent_before_the_wait_is_kept_for_it() -> None:
    sim = Simulator(WAITS, {})

    assert sim.signal("resolved", {"early": True}) == "kept"
    sim.run()
    sim.advance(30)
    assert sim.run() == "COMPLETED"
    assert sim.outputs["confirm"]["received"] is True


def test_a_wait_for_a_signal_that_never_comes_fails_and_compensates() -> None:
    sim = Simulator(WAITS, {})
    sim.run()
    sim.advance(30).run()
    sim.advance(60)

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.SIGNAL_TIMEOUT
    assert sim.compensated == ["stop"]
    assert sim.signal("resolved") == "finished"


def test_the_run_deadline_turns_the_saga_back() -> None:
    wf = Workflow("sim-deadline", 1, [*WAITS.steps], deadline_seconds=10)
    sim = Simulator(wf, {})
    sim.run()
    sim.advance(10)

    assert sim.run() == "FAILED"
    assert sim.failure_code == saga.DEADLINE
    assert sim.compensated == ["stop"]


def test_an_outcome_for_a_step_the_workflow_does_not_have_is_refused() -> None:
    with pytest.raises(KeyError):
        Simulator(RESTART, {}).outcome("nope", reject="x")
    with pytest.raises(ValueError):
        Simulator(RESTART, {}).outcome("stop", reject="x", halt="y")


def _tag_service(ctx: StepContext) -> dict[str, Any]:
    ctx.tag(service=ctx.input["event"]["service"], host="web-1")
    return {}


def _tag_more(ctx: StepContext) -> dict[str, Any]:
    ctx.tag({"k8s.ns": "ops", "service": "db-2"})
    return {}


def _tag_badly(ctx: StepContext) -> None:
    ctx.tag({"not a key": "x"})


def test_the_simulator_records_the_tags_steps_set_a_later_value_replacing_an_earlier() -> None:
    tagging = Workflow("sim-tags", 1, [Step("a", _tag_service), Step("b", _tag_more)])
    sim = Simulator(tagging, {"service": "db-1"})

    assert sim.run() == "COMPLETED"

    assert sim.tags == {"service": "db-2", "host": "web-1", "k8s.ns": "ops"}
    assert [e.get("tags") for e in sim.journal] == [
        {"service": "db-1", "host": "web-1"},
        {"k8s.ns": "ops", "service": "db-2"},
    ]


def test_a_bad_tag_fails_its_step_at_once_without_retries() -> None:
    tagging = Workflow("sim-bad-tag", 1, [Step("a", _tag_badly, retry=RetryPolicy(max_retries=3))])
    sim = Simulator(tagging)

    assert sim.run() == "FAILED"

    failed = [e for e in sim.journal if e.get("status") == "FAILED"]
    assert len(failed) == 1
    assert failed[0]["error"].startswith("TagError: tag key 'not a key' must be")
    assert sim.tags == {}
