"""Workflows of ``make bench-capacity`` (:mod:`bench.capacity`), registered the documented way a
deployment adds its own: ``AWOOOP_WORKFLOW_MODULES=bench.workflows`` in the environment of the
web (which routes events to them) and of the worker (which runs them).

``bench-hold`` v1 — one step, ``hold``, that keeps its run RUNNING for ``event["hold"]``
seconds (0 by default) and returns. It waits on the lease (``ctx.lease_lost``), as a long
handler should: all the while the worker's lease keeper renews the run's lease, which is
what the capacity bench measures. When the lease is lost it stops at once (raises), so a run
whose lease was lost ends FAILED and the bench sees it.

Only :mod:`awooop.domain` and the registry are imported: this module is loaded by the worker
and web processes.
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
