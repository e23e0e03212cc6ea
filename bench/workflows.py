"""``make bench-capacity``'s workflow (``AWOOOP_WORKFLOW_MODULES=bench.workflows``):
``bench-hold`` holds its run RUNNING, and its lease, for ``event["hold"]`` seconds; a lost
lease fails the run."""

from __future__ import annotations

from typing import Any

from awooop.domain.workflow import Step, StepContext, Workflow
from awooop.workflows.registry import register

HOLD = "bench-hold"


class LeaseLostStop(RuntimeError):
    """The lease was lost while the step held the run: stop (nothing we return is kept)."""


def _hold(ctx: StepContext) -> dict[str, Any]:
    event = ctx.input.get("event")
    seconds = float((event if isinstance(event, dict) else {}).get("hold", 0) or 0)
    if seconds > 0 and ctx.lease_lost.wait(seconds):
        raise LeaseLostStop("lease lost while holding the run")
    return {"held_seconds": seconds}


BENCH_HOLD = register(
    Workflow(
        HOLD,
        1,
        [Step("hold", _hold)],
        max_attempts=1,
        description="capacity bench: one step that holds its run (and lease) for a while",
    )
)
