"""``late-compensation``: undoing a tool step's late success that its saga gave up on.

Started by the tool-result API for steps with ``late_result="compensate"`` (one run per
original run and step), never by a project's route or a client: it is registered
engine-only. It runs the original step's compensation with the original step's
compensate effect id, through the ordinary machinery: lease, retries, escalation.
"""

from __future__ import annotations

from typing import Any

from awooop.domain.workflow import RetryPolicy, Step, StepContext, Workflow
from awooop.workflows import registry


def undo_late_success(ctx: StepContext) -> Any:
    original = ctx.input["event"]
    workflow = registry.get(original["workflow"], original["version"])
    step = workflow.steps[workflow.step_index(original["step"])]
    assert step.compensate is not None
    effect_id = f"{original['run_id']}:{step.name}:compensate"
    return step.compensate(
        StepContext(
            run_id=original["run_id"],
            project_id=ctx.project_id,
            input=original["input"],
            outputs={step.name: original["output"]},
            step=step.name,
            attempt=ctx.attempt,
            effect_id=effect_id,
            command_id=f"{effect_id}:late:{ctx.command_id}",
            phase="compensate",
            _heartbeat=ctx.heartbeat,
            _lease_held=lambda: ctx.lease_held,
        )
    )


LATE_COMPENSATION = registry.register(
    Workflow(
        "late-compensation",
        1,
        [Step("undo", undo_late_success, retry=RetryPolicy(max_retries=4, base_delay=2.0))],
        description="Undo a tool step's success that arrived after its saga gave up on it",
    ),
    engine_only=True,
)
