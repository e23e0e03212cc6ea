"""Executing one run segment under a lease: claim → (check → run → record) per step → finish.

The skeleton's step runner: steps run in order; a recorded success is replayed from the
journal, never re-executed; a step that raises fails the run (retries, compensation and
waiting states come with the saga engine). Every write is fenced by the claim's lease.
"""

from __future__ import annotations

import enum
import json
import logging
import time
import uuid
from typing import Any

from sqlalchemy import Engine

from awooop.config import Settings
from awooop.domain import states
from awooop.domain.workflow import StepContext, Workflow
from awooop.engine import identity, lease
from awooop.engine.lease import Lease
from awooop.store import runs
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.runner")

FORWARD = "forward"
STEP_FAILED_CODE = "E-STEP-001"
WORKFLOW_UNAVAILABLE_RETRY_SECONDS = 60.0


class Outcome(enum.Enum):
    NOT_CLAIMED = "not_claimed"  # someone else holds it, or it is not claimable (a duplicate nudge)
    COMPLETED = "completed"
    FAILED = "failed"
    LEASE_LOST = "lease_lost"  # reaped or re-claimed while we ran: stopped without writing
    RELEASED = "released"  # this worker cannot run the workflow; handed back for another


def succeeded_outputs(journal: list[dict[str, Any]]) -> dict[str, Any]:
    """Outputs of the forward steps already recorded as SUCCEEDED, by step name."""
    return {
        e["step"]: e.get("output")
        for e in journal
        if e.get("phase") == FORWARD and e.get("status") == "SUCCEEDED"
    }


def execute(engine: Engine, settings: Settings, run_id: uuid.UUID | str | None) -> Outcome:
    """Claim ``run_id`` (or the oldest claimable run) and drive it as far as it goes."""
    me = identity.worker_id()
    with engine.connect() as conn:
        claim = runs.claim(conn, me, settings.lease_ttl_seconds, run_id)
    if claim is None:
        log.info(
            "run not claimable",
            extra={"action": "claim_skipped", "run_id": str(run_id), "worker_id": me},
        )
        return Outcome.NOT_CLAIMED
    fields = _fields(claim)
    log.info(
        "run claimed", extra={**fields, "action": "run_claimed", "attempt": claim.attempt_count}
    )

    try:
        workflow = registry.get(claim.workflow_name, claim.workflow_version)
    except registry.UnknownWorkflow:
        workflow = None
    if workflow is None or workflow.digest != claim.workflow_digest:
        log.error(
            "workflow definition missing or changed in this worker; run handed back",
            extra={
                **fields,
                "action": "workflow_unavailable",
                "workflow": f"{claim.workflow_name}:v{claim.workflow_version}",
            },
        )
        with engine.connect() as conn:
            runs.release(conn, claim, WORKFLOW_UNAVAILABLE_RETRY_SECONDS, "workflow_unavailable")
        return Outcome.RELEASED

    lease_ttl = workflow.lease_ttl_seconds or settings.lease_ttl_seconds
    held = Lease(engine, claim, lease_ttl, settings.heartbeat_interval_seconds)
    if lease_ttl != settings.lease_ttl_seconds and not held.renew_now():
        return Outcome.LEASE_LOST
    keeper = lease.keeper()
    keeper.hold(held)
    try:
        return _run_steps(engine, claim, workflow, held)
    finally:
        keeper.drop(held)


def _run_steps(engine: Engine, claim: runs.Claim, workflow: Workflow, heartbeat: Lease) -> Outcome:
    fields = _fields(claim)
    outputs = succeeded_outputs(claim.saga_steps)
    remaining = [(i, s) for i, s in enumerate(workflow.steps) if s.name not in outputs]
    for position, (index, step) in enumerate(remaining):
        effect_id = f"{claim.run_id}:{step.name}:{FORWARD}"
        ctx = StepContext(
            run_id=str(claim.run_id),
            project_id=claim.project_id,
            input=claim.input,
            outputs=dict(outputs),
            step=step.name,
            attempt=claim.attempt_count,
            effect_id=effect_id,
            command_id=f"{effect_id}:{claim.lease_epoch}",
            _heartbeat=heartbeat.renew_now,
            _lease_held=lambda: not heartbeat.lost.is_set(),
        )
        entry: dict[str, Any] = {
            "step": step.name,
            "index": index,
            "phase": FORWARD,
            "attempt": claim.attempt_count,
            "lease_epoch": claim.lease_epoch,
            "worker_id": claim.worker_id,
            "effect_id": ctx.effect_id,
            "command_id": ctx.command_id,
        }
        started = time.monotonic()
        try:
            output = step.handler(ctx)
            json.dumps(output)  # the journal must be able to hold it
        except Exception as exc:
            entry.update(status="FAILED", error=f"{type(exc).__name__}: {exc}")
            output = None
        else:
            entry.update(status="SUCCEEDED", output=output)
        entry["duration_ms"] = round((time.monotonic() - started) * 1000, 3)

        if heartbeat.lost.is_set():
            log.warning(
                "lease lost during step; result not recorded",
                extra={**fields, "action": "lease_lost", "step": step.name},
            )
            return Outcome.LEASE_LOST

        is_last = position == len(remaining) - 1
        with engine.connect() as conn:  # each write is one statement
            if entry["status"] == "FAILED":
                held = runs.finish(
                    conn,
                    claim,
                    entry,
                    to_status=states.FAILED,
                    saga_status="RUNNING",
                    failure_code=STEP_FAILED_CODE,
                    failure_reason=f"step {step.name} failed: {entry['error']}"[:1000],
                )
                outcome = Outcome.FAILED
            elif is_last:
                held = runs.finish(
                    conn,
                    claim,
                    entry,
                    to_status=states.COMPLETED,
                    saga_status="COMPLETED",
                    output=output,
                )
                outcome = Outcome.COMPLETED
            else:
                held = runs.record_step(
                    conn, claim, entry, next_step=remaining[position + 1][1].name
                )
                outcome = None
        if not held:
            heartbeat.lost.set()
            log.warning(
                "lease lost; step result discarded",
                extra={**fields, "action": "lease_lost", "step": step.name},
            )
            return Outcome.LEASE_LOST
        log.debug(
            "step recorded",
            extra={
                **fields,
                "action": "step_recorded",
                "step": step.name,
                "status": entry["status"],
            },
        )
        if outcome is not None:
            log.info("run finished", extra={**fields, "action": f"run_{outcome.value}"})
            return outcome
        outputs[step.name] = output
    # Every step had already succeeded (a crash between the last record and finish cannot
    # happen: the last step is recorded by the finishing statement itself).
    raise AssertionError(f"run {claim.run_id} claimed with no step left to run")


def _fields(claim: runs.Claim) -> dict[str, Any]:
    return {
        "run_id": str(claim.run_id),
        "project_id": claim.project_id,
        "worker_id": claim.worker_id,
        "lease_epoch": claim.lease_epoch,
    }
