"""A claimed run whose workflow definition this worker does not have.

The run keeps the workflow name, version and digest it started with; a worker whose registry
lacks that definition (an older or newer release, a module not imported) cannot run it. It
hands the run back to be claimed again in a minute — another worker may have the definition,
or a deploy may bring it back — and, once the run has been handed back like this for
``AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS`` (measured by the database, from the run's
own events: :func:`awooop.store.leases.unavailable_for`), fails it with ``E-RUN-003`` instead
of handing it back for ever. Nothing is compensated: no handler of the run can be called.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from awooop import metrics
from awooop.config import Settings
from awooop.domain import states
from awooop.store import leases

log = logging.getLogger("awooop.engine.unavailable")

# How soon a handed-back run may be claimed again (sooner when its time is nearly up).
RETRY_SECONDS = 60.0


def hand_back_or_fail(engine: Engine, settings: Settings, claim: leases.Claim) -> str:
    """Hand ``claim``'s run back, or fail it once it has been unavailable for too long. What
    happened: "released", "failed", or "lease_lost" (the lease was gone before either)."""
    workflow = f"{claim.workflow_name}:v{claim.workflow_version}"
    fields = {
        "run_id": str(claim.run_id),
        "project_id": claim.project_id,
        "worker_id": claim.worker_id,
        "workflow": workflow,
        "workflow_digest": claim.workflow_digest,
    }
    limit = settings.workflow_unavailable_fail_after_seconds
    with engine.connect() as conn:
        waited = leases.unavailable_for(conn, claim.run_id)
        if waited >= limit:
            outcome = "failed"
            reason = (
                f"no worker had workflow {workflow} (digest {claim.workflow_digest[:12]}) for "
                f"{waited:.0f} s (AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS={limit:g})"
            )
            done = leases.fail_claimed(
                conn,
                claim.run_id,
                claim.worker_id,
                claim.lease_epoch,
                leases.WORKFLOW_UNAVAILABLE,
                reason,
            )
        else:
            outcome = "released"
            delay = min(RETRY_SECONDS, limit - waited)
            done = leases.release(conn, claim, delay, "workflow_unavailable")
    if not done:
        log.warning(
            "lease lost before the run could be handed back",
            extra={**fields, "action": "lease_lost"},
        )
        return "lease_lost"
    metrics.WORKFLOW_UNAVAILABLE.labels(
        claim.workflow_name, str(claim.workflow_version), outcome
    ).inc()
    if outcome == "failed":
        metrics.RUNS_FINISHED.labels(states.FAILED).inc()
        # Its age at the claim: the hand-back is a moment after it.
        metrics.run_finished(
            claim.workflow_name, states.FAILED, leases.WORKFLOW_UNAVAILABLE, claim.age_seconds
        )
        log.error(
            "workflow definition unavailable for too long; run failed",
            extra={
                **fields,
                "action": "workflow_unavailable_failed",
                "failure_code": leases.WORKFLOW_UNAVAILABLE,
                "unavailable_s": round(waited, 1),
            },
        )
    else:
        log.error(
            "workflow definition missing or changed in this worker; run handed back",
            extra={**fields, "action": "workflow_unavailable", "unavailable_s": round(waited, 1)},
        )
    return outcome
