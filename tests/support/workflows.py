"""Workflows used only by tests (``AWOOOP_WORKFLOW_MODULES=tests.support.workflows``).

``test-gated``: its ``wait`` step blocks on an in-process gate named by the run input, then
records whether its lease is still held — for fencing tests in one process.
``test-crash``: its ``block`` step, on the first attempt only, writes a marker file and
sleeps, so a test can SIGKILL the worker process mid-step.
``test-fail``: a step that raises.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from awooop.domain.workflow import Step, StepContext, Workflow
from awooop.workflows.registry import register

GATES: dict[str, threading.Event] = {}
LEASE_HELD_AFTER_GATE: dict[str, bool] = {}


def _noop(ctx: StepContext) -> dict[str, Any]:
    return {"step": ctx.step, "attempt": ctx.attempt}


def _wait_for_gate(ctx: StepContext) -> dict[str, Any]:
    gate = ctx.input["event"]["gate"]
    GATES[gate].wait(timeout=30)
    LEASE_HELD_AFTER_GATE[gate] = ctx.heartbeat()
    return {"gate": gate}


def _block_first_attempt(ctx: StepContext) -> dict[str, Any]:
    marker = Path(ctx.input["event"]["marker"])
    if ctx.attempt == 1:
        marker.write_text(ctx.command_id)
        time.sleep(120)  # the test kills the worker here
    return {"attempt": ctx.attempt, "effect_id": ctx.effect_id}


def _fail(ctx: StepContext) -> None:
    raise RuntimeError("the downstream service said no")


GATED = register(Workflow("test-gated", 1, [Step("wait", _wait_for_gate), Step("after", _noop)]))
CRASH = register(
    Workflow(
        "test-crash",
        1,
        [Step("before", _noop), Step("block", _block_first_attempt), Step("after", _noop)],
    )
)
FAIL = register(
    Workflow("test-fail", 1, [Step("first", _noop), Step("broken", _fail), Step("never", _noop)])
)
