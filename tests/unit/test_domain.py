"""Run states, workflow definitions and the registry."""

from __future__ import annotations

import pytest

from awooop.domain import states
from awooop.domain.workflow import Step, Workflow
from awooop.workflows import registry


def test_terminal_statuses_go_nowhere():
    for terminal in states.TERMINAL_STATUSES:
        for target in states.RUN_STATUSES:
            assert not states.can_transition(terminal, target)


def test_waiting_approval_is_left_only_by_a_decision_or_a_manual_close():
    assert states.ALLOWED_TRANSITIONS[states.WAITING_APPROVAL] == {
        states.RESUMED,
        states.CANCELLED,
    }


def test_a_run_ends_only_from_the_hands_of_its_worker_or_the_reaper_or_a_manual_close():
    # A run is finished by the statement that records its last step (RUNNING), by the
    # reaper (RUNNING), or by an operator's manual close (WAITING_APPROVAL): no other move
    # into a terminal status is made, so none is allowed.
    ends = {
        (a, b)
        for a, targets in states.ALLOWED_TRANSITIONS.items()
        for b in targets
        if b in states.TERMINAL_STATUSES
    }
    assert ends == {
        (states.RUNNING, states.COMPLETED),
        (states.RUNNING, states.FAILED),
        (states.RUNNING, states.CANCELLED),
        (states.WAITING_APPROVAL, states.CANCELLED),
    }


def test_illegal_transition_is_refused():
    with pytest.raises(states.IllegalTransition, match="COMPLETED cannot move to RUNNING"):
        states.check_transition(states.COMPLETED, states.RUNNING)


def test_every_status_has_an_entry_in_the_table():
    assert set(states.ALLOWED_TRANSITIONS) == set(states.RUN_STATUSES)


def _step(ctx):
    return None


def test_workflow_digest_changes_with_structure():
    a = Workflow("w", 1, [Step("s", _step)])
    assert a.digest == Workflow("w", 1, [Step("s", _step)]).digest
    assert a.digest != Workflow("w", 1, [Step("s", _step), Step("t", _step)]).digest
    assert a.digest != Workflow("w", 1, [Step("s", _step)], max_attempts=5).digest


@pytest.mark.parametrize(
    ("steps", "kwargs", "message"),
    [
        ([], {}, "no steps"),
        ([Step("a", _step), Step("a", _step)], {}, "duplicate"),
        ([Step("a", _step)], {"max_attempts": 0}, "max_attempts"),
    ],
)
def test_invalid_workflows_are_refused(steps, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Workflow("w", 1, steps, **kwargs)


def test_registry_keeps_old_versions_and_refuses_a_changed_redefinition():
    v1 = registry.register(Workflow("unit-wf", 1, [Step("a", _step)]))
    v2 = registry.register(Workflow("unit-wf", 2, [Step("a", _step), Step("b", _step)]))

    assert registry.get("unit-wf", 1) is v1
    assert registry.latest("unit-wf") is v2
    with pytest.raises(ValueError, match="bump the version"):
        registry.register(Workflow("unit-wf", 1, [Step("z", _step)]))
    with pytest.raises(registry.UnknownWorkflow):
        registry.get("unit-wf", 3)


def test_builtin_demo_workflow_for_every_channel():
    for channel in ("telegram", "alertmanager", "gitea", "line", "api"):
        assert registry.latest(f"demo-{channel}") is not None


def test_retry_delays_grow_exponentially_up_to_the_cap():
    from awooop.domain.workflow import RetryPolicy

    policy = RetryPolicy(max_retries=5, base_delay=1.0, factor=2.0, max_delay=5.0, jitter=0.0)
    assert [policy.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_retry_jitter_stays_within_its_fraction():
    import random

    from awooop.domain.workflow import RetryPolicy

    policy = RetryPolicy(max_retries=1, base_delay=10.0, jitter=0.2)
    delays = [policy.delay(1, random.Random(seed)) for seed in range(200)]
    assert min(delays) >= 8.0 and max(delays) <= 12.0
    assert len(set(delays)) > 100


def test_only_listed_errors_are_retried():
    from awooop.domain import saga
    from awooop.domain.workflow import RetryPolicy

    step = Step("s", _step, retry=RetryPolicy(max_retries=3, retry_on=(TimeoutError,)))
    workflow = Workflow("w", 1, [step])
    nxt = saga.next_step(workflow, [])
    assert nxt is not None
    retryable = {"step": "s", "phase": "forward", "attempt": 1, "status": "FAILED"}

    assert saga.decide(workflow, [], nxt, retryable).kind == "retry"
    assert saga.decide(workflow, [], nxt, {**retryable, "retryable": False}).kind == "compensated"
    assert step.retry.retries(TimeoutError()) and not step.retry.retries(ValueError())


def test_a_workflow_allows_three_attempts_by_default():
    # A run segment gets three claims unless its workflow says otherwise.
    assert Workflow("w", 1, [Step("s", _step)]).max_attempts == 3
