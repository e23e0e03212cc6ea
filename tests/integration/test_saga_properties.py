"""Property-based: random step outcomes, crashes and timer firings against the real engine.

Each example scripts what the handlers do, one outcome per handler call: succeed, fail
(transient), reject, halt, or crash (the worker dies: nothing is recorded, the lease expires
and the reaper returns the run). The driver claims, reaps and fires timers until the run
stops, then checks the saga's invariants on the journal and the run row.
"""

from __future__ import annotations

import time
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awooop.domain import saga
from awooop.domain.workflow import Halt, Reject, RetryPolicy, Step, StepContext, Workflow
from awooop.engine import runner, sweeps
from awooop.workflows import registry
from tests.support import db
from tests.support import runs as test_runs

SCRIPTS: dict[str, deque[str]] = {}
TTL = 0.05


class WorkerCrash(BaseException):
    """The worker process died mid-step (escapes every `except Exception`)."""


def _scripted(ctx: StepContext) -> dict:
    outcome = SCRIPTS[ctx.run_id].popleft() if SCRIPTS[ctx.run_id] else "ok"
    if outcome == "fail":
        raise ConnectionError("transient")
    if outcome == "reject":
        raise Reject("no")
    if outcome == "halt":
        raise Halt("look")
    if outcome == "crash":
        raise WorkerCrash()
    return {"step": ctx.step, "phase": ctx.phase}


QUICK = RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0)
WORKFLOW = registry.register(
    Workflow(
        "test-prop",
        1,
        [
            Step(
                name,
                _scripted,
                compensate=_scripted if name != "b" else None,
                retry=QUICK,
                compensation_retry=QUICK,
            )
            for name in ("a", "b", "c", "d")
        ],
        max_attempts=3,
    )
)

OUTCOMES = st.sampled_from(["ok", "ok", "ok", "ok", "fail", "reject", "halt", "crash"])


def drive(engine, run_settings, run_id) -> None:
    for _ in range(60):
        row = db.run(engine, run_id)
        if row["status"] in ("COMPLETED", "FAILED", "CANCELLED", "WAITING_APPROVAL"):
            return
        try:
            runner.execute(engine, run_settings, run_id)
        except WorkerCrash:
            time.sleep(TTL + 0.02)
            sweeps.reap_once(engine)
        sweeps.fire_due_timers_once(engine, run_settings)
    raise AssertionError(f"run {run_id} did not stop: {db.run(engine, run_id)}")


def check_invariants(row: dict) -> None:
    journal = row["saga_steps"]
    outcomes = [e for e in journal if e["phase"] in (saga.FORWARD, saga.COMPENSATE)]
    # No step attempt has two recorded outcomes.
    keys = [(e["step"], e["phase"], e["attempt"]) for e in outcomes]
    assert len(keys) == len(set(keys)), keys
    # Going forward, the succeeded steps are a prefix of the workflow's order.
    order = [s.name for s in WORKFLOW.steps]
    succeeded = [
        e["step"] for e in outcomes if e["phase"] == saga.FORWARD and e["status"] == saga.SUCCEEDED
    ]
    assert succeeded == order[: len(succeeded)]
    # Compensations: only of succeeded steps with a compensation, in reverse order.
    plans = [e for e in journal if e["phase"] == saga.PLAN]
    assert len(plans) <= 1
    undone = [
        e["step"]
        for e in outcomes
        if e["phase"] == saga.COMPENSATE and e["status"] == saga.SUCCEEDED
    ]
    if plans:
        expected = [s for s in reversed(succeeded) if s != "b"]
        assert plans[0]["steps"] == expected
        assert undone == expected[: len(undone)]
    else:
        assert undone == []
    # Exactly one way of having stopped, consistent with the journal.
    status, saga_status = row["status"], row["saga_status"]
    if status == "COMPLETED":
        assert (saga_status, succeeded, plans) == ("COMPLETED", order, [])
    elif status == "FAILED" and saga_status == "COMPENSATED":
        assert plans and undone == plans[0]["steps"]
    elif status == "FAILED":
        assert row["failure_reason"] == "Max retry attempts exceeded"
    else:
        assert (status, saga_status) == ("WAITING_APPROVAL", "MANUAL_INTERVENTION")


# A run of successes first (so later failures have something to compensate), then noise.
SCRIPTS_STRATEGY = st.tuples(st.integers(0, 4), st.lists(OUTCOMES, max_size=10)).map(
    lambda t: ["ok"] * t[0] + t[1]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=SCRIPTS_STRATEGY)
def test_random_outcomes_crashes_and_timers_keep_the_saga_invariants(
    engine, project, settings, script
):
    run_settings = settings.__class__(
        **{**settings.__dict__, "lease_ttl_seconds": TTL, "heartbeat_interval_seconds": 60.0}
    )
    run_id = test_runs.admit(engine, project["project_id"], "test-prop")
    SCRIPTS[str(run_id)] = deque(script)

    drive(engine, run_settings, run_id)

    check_invariants(db.run(engine, run_id))


@pytest.mark.parametrize(
    ("script", "status", "saga_status", "undone"),
    [
        ([], "COMPLETED", "COMPLETED", []),
        (["reject"], "FAILED", "COMPENSATED", []),
        (["ok", "ok", "halt"], "WAITING_APPROVAL", "MANUAL_INTERVENTION", []),
        # d rejects after a, b, c succeeded: undo c, then a (b has no compensation).
        (["ok", "ok", "ok", "reject"], "FAILED", "COMPENSATED", ["c", "a"]),
        (["crash"] * 3, "FAILED", "RUNNING", []),
    ],
)
def test_known_scripts_end_as_expected(
    engine, project, settings, script, status, saga_status, undone
):
    run_settings = settings.__class__(
        **{**settings.__dict__, "lease_ttl_seconds": TTL, "heartbeat_interval_seconds": 60.0}
    )
    run_id = test_runs.admit(engine, project["project_id"], "test-prop")
    SCRIPTS[str(run_id)] = deque(script)

    drive(engine, run_settings, run_id)

    row = db.run(engine, run_id)
    check_invariants(row)
    assert (row["status"], row["saga_status"]) == (status, saga_status)
    assert [e["step"] for e in row["saga_steps"] if e["phase"] == "compensate"] == undone
