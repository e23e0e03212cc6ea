"""A cancel (or the run deadline) settles a step in doubt before it turns the saga back: the
pure decisions of :mod:`awooop.domain.saga`."""

from __future__ import annotations

from typing import Any

import pytest

from awooop.domain import saga
from awooop.domain.workflow import Resolver, Step, StepContext, Workflow

CANCEL = saga.Cancel.of(saga.CANCELLED)


def _do(ctx: StepContext) -> None: ...


def _check(ctx: StepContext) -> None: ...


RESOLVER = Resolver(_check, budget=0.35, poll_interval=0.1)  # three polls


def _workflow(**doubtful: Any) -> Workflow:
    return Workflow(
        "settle",
        1,
        [
            Step("a", _do, compensate=_do),
            Step("restart", _do, compensate=_do, **doubtful),
            Step("c", _do, compensate=_do),
        ],
    )


def _entry(step: str, status: str, attempt: int = 1, phase: str = saga.FORWARD) -> dict[str, Any]:
    return {"step": step, "phase": phase, "status": status, "attempt": attempt}


A_DONE = _entry("a", saga.SUCCEEDED)


def test_a_cancel_reads_the_deadline_or_an_operator_from_the_failure_code():
    assert saga.Cancel.of(None) == saga.Cancel(saga.CANCELLED, "cancelled by an operator")
    assert saga.Cancel.of(saga.DEADLINE) == saga.Cancel(saga.DEADLINE, "the run deadline passed")


@pytest.mark.parametrize("status", [saga.UNKNOWN, saga.HALTED])
def test_a_cancel_polls_the_resolver_of_a_step_in_doubt_first(status):
    workflow = _workflow(resolver=RESOLVER)
    journal = [A_DONE, _entry("restart", status)]

    nxt = saga.next_step(workflow, journal, CANCEL)

    assert nxt is not None
    assert (nxt.step.name, nxt.phase, nxt.attempt) == ("restart", saga.RESOLVE, 1)


def test_a_cancel_with_nothing_in_doubt_has_nothing_to_settle():
    workflow = _workflow(resolver=RESOLVER)
    assert saga.next_step(workflow, [A_DONE], CANCEL) is None
    failed = [A_DONE, _entry("restart", saga.FAILED)]
    assert saga.next_step(workflow, failed, CANCEL) is None
    # without a cancel the same journal goes on forward
    nxt = saga.next_step(workflow, failed)
    assert nxt is not None and (nxt.step.name, nxt.phase) == ("restart", saga.FORWARD)


def test_a_step_resolved_as_happened_is_compensated_after_the_cancel():
    workflow = _workflow(resolver=RESOLVER)
    journal = [A_DONE, _entry("restart", saga.UNKNOWN)]
    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None
    poll = {**_entry("restart", saga.SUCCEEDED, phase=saga.RESOLVE), "output": {"up": True}}

    decision = saga.decide(workflow, journal, nxt, poll, cancelling=CANCEL)

    assert (decision.kind, decision.failure_code) == ("turn_back", saga.CANCELLED)
    resolve, settled, plan = decision.entries
    assert resolve is poll
    assert (settled["phase"], settled["status"], settled["attempt"]) == (
        saga.FORWARD,
        saga.SUCCEEDED,
        1,
    )
    assert settled["resolved"] is True
    assert plan["phase"] == saga.PLAN
    assert plan["steps"] == ["restart", "a"]  # reverse order, the resolved step first
    assert plan["cause"]["code"] == saga.CANCELLED


def test_a_step_resolved_as_not_happened_is_not_compensated():
    workflow = _workflow(resolver=RESOLVER)
    journal = [A_DONE, _entry("restart", saga.UNKNOWN)]
    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None
    poll = {**_entry("restart", saga.REJECTED, phase=saga.RESOLVE), "error": "never happened"}

    decision = saga.decide(workflow, journal, nxt, poll, cancelling=CANCEL)

    assert (decision.kind, decision.failure_code) == ("turn_back", saga.CANCELLED)
    assert decision.entries[-1]["steps"] == ["a"]


def test_a_resolved_last_step_is_compensated_not_completed():
    workflow = Workflow("last", 1, [Step("restart", _do, compensate=_do, resolver=RESOLVER)])
    journal = [_entry("restart", saga.UNKNOWN)]
    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None
    poll = _entry("restart", saga.SUCCEEDED, phase=saga.RESOLVE)

    decision = saga.decide(workflow, journal, nxt, poll, cancelling=CANCEL)

    assert decision.kind == "turn_back"
    assert decision.entries[-1]["steps"] == ["restart"]


def test_a_poll_that_cannot_tell_polls_again_with_the_cancel_kept_then_asks_a_person():
    workflow = _workflow(resolver=RESOLVER)
    journal = [A_DONE, _entry("restart", saga.UNKNOWN)]
    for attempt in (1, 2):
        nxt = saga.next_step(workflow, journal, CANCEL)
        assert nxt is not None and nxt.attempt == attempt
        poll = _entry("restart", saga.UNKNOWN, attempt=attempt, phase=saga.RESOLVE)
        decision = saga.decide(workflow, journal, nxt, poll, cancelling=CANCEL)
        # "retry" leaves the saga CANCELLING ("resolve" would move it to WAITING_RESOLUTION)
        assert (decision.kind, decision.delay) == ("retry", RESOLVER.poll_interval)
        journal = [*journal, poll]

    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None and nxt.tries == 3
    poll = _entry("restart", saga.UNKNOWN, attempt=3, phase=saga.RESOLVE)
    decision = saga.decide(workflow, journal, nxt, poll, cancelling=CANCEL)

    assert (decision.kind, decision.failure_code) == ("escalate", saga.CANCELLED)
    assert "cancelled by an operator" in (decision.failure_reason or "")
    assert "3 resolver polls" in (decision.failure_reason or "")


@pytest.mark.parametrize("status", [saga.UNKNOWN, saga.HALTED])
def test_a_step_in_doubt_without_a_resolver_goes_to_a_person_not_to_compensation(status):
    workflow = _workflow()
    journal = [A_DONE, _entry("restart", status)]
    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None and nxt.phase == saga.RESOLVE
    # what the runner records for a resolve without a resolver
    poll = {**_entry("restart", saga.UNKNOWN, phase=saga.RESOLVE), "error": "no resolver"}

    decision = saga.decide(workflow, journal, nxt, poll, cancelling=CANCEL)

    assert (decision.kind, decision.failure_code) == ("escalate", saga.CANCELLED)
    assert "no resolver" in (decision.failure_reason or "")
    assert not [e for e in decision.entries if e.get("phase") == saga.PLAN]


def test_a_cancel_waits_for_a_dispatched_tool_call():
    workflow = _workflow(tool_timeout=30.0)
    journal = [A_DONE, _entry("restart", saga.DISPATCHED)]
    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None
    assert (nxt.phase, nxt.attempt) == (saga.FORWARD, 1)
    assert saga.dispatched(journal, nxt)  # the runner does not send it again

    decision = saga.decide(
        workflow, journal, nxt, _entry("restart", saga.DISPATCHED), cancelling=CANCEL
    )

    assert (decision.kind, decision.delay) == ("wait_tool", 30.0)


@pytest.mark.parametrize(
    ("result", "plan"),
    [(saga.SUCCEEDED, ["restart", "a"]), (saga.FAILED, ["a"]), (saga.REJECTED, ["a"])],
)
def test_the_tool_result_says_whether_the_call_is_compensated(result, plan):
    workflow = _workflow(tool_timeout=30.0)
    journal = [
        A_DONE,
        _entry("restart", saga.DISPATCHED),
        _entry("restart", result, phase=saga.TOOL_RESULT),
    ]
    nxt = saga.next_step(workflow, journal, CANCEL)
    assert nxt is not None and (nxt.phase, nxt.attempt) == (saga.FORWARD, 1)

    # a transient failure with retries left is not retried: the run is being cancelled
    decision = saga.decide(workflow, journal, nxt, _entry("restart", result), cancelling=CANCEL)

    assert (decision.kind, decision.failure_code) == ("turn_back", saga.CANCELLED)
    assert decision.entries[0]["status"] == result
    assert decision.entries[-1]["steps"] == plan


def test_a_deadline_keeps_its_own_failure_code_through_the_settling():
    workflow = _workflow(resolver=RESOLVER)
    journal = [_entry("a", saga.UNKNOWN)]  # the first step: nothing else to undo
    deadline = saga.Cancel.of(saga.DEADLINE)
    nxt = saga.next_step(workflow, journal, deadline)
    assert nxt is not None and nxt.step.name == "a"
    poll = _entry("a", saga.REJECTED, phase=saga.RESOLVE)

    decision = saga.decide(workflow, journal, nxt, poll, cancelling=deadline)

    assert (decision.kind, decision.failure_code) == ("compensated", saga.DEADLINE)
    assert decision.failure_reason == "the run deadline passed"


def test_a_succeeded_forward_step_decides_the_step_after_it_once():
    """The runner takes the next step from the decision instead of working it out again."""
    workflow = _workflow()
    journal = [A_DONE]
    nxt = saga.next_step(workflow, journal)
    assert nxt is not None and nxt.step.name == "restart"
    entry = _entry("restart", saga.SUCCEEDED)

    decision = saga.decide(workflow, journal, nxt, entry)

    assert decision.kind == "record"
    assert decision.upcoming == saga.next_step(workflow, [*journal, entry])
    assert decision.upcoming is not None and decision.upcoming.step.name == "c"
    last = saga.decide(workflow, [*journal, entry], decision.upcoming, _entry("c", saga.SUCCEEDED))
    assert (last.kind, last.upcoming) == ("complete", None)
