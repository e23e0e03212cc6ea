"""Workflows of ``make bench-capacity``, registered the documented way a deployment adds its
own: ``AWOOOP_WORKFLOW_MODULES=bench.workflows`` for the web and the worker.

``bench-hold`` v1: one step that keeps its run RUNNING for ``event["hold"]`` seconds, waiting
on the lease (so the worker's lease keeper renews it, which the bench measures); a lost lease
stops it at once, so the run ends FAILED and the bench sees it. Imports only the domain and
the registry (loaded by the worker and web processes).
"""

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
