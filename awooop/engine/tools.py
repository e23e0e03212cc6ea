"""Asynchronous tool results (WAITING_TOOL): the engine API behind
``POST /v1/projects/{project_id}/runs/{run_id}/tool-results``.

A tool step's handler dispatches a call and the run waits, with no worker, for its result.
A result is accepted once per event id (``awooop_inbox``); the run becomes claimable and the
next worker turns the result into the step's outcome (success, transient failure — retried
by the step's policy, which dispatches again with the same effect id — or rejection). A result
that arrives when the run is no longer waiting on that step is late: the step's
``late_result`` policy decides (see docs/workflows.md); a result contradicting one already
recorded for the same attempt is a conflict, escalated to a person. A result for a step the
run's workflow version does not define is refused (422 ``E-TOOL-001``) and writes nothing.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from awooop import bodies, errors
from awooop.channels.base import digest
from awooop.domain import saga
from awooop.store import admission, tools
from awooop.workflows import registry

log = logging.getLogger("awooop.engine.tools")

RESULT_STATUSES = {"succeeded": saga.SUCCEEDED, "failed": saga.FAILED, "rejected": saga.REJECTED}
# The body of POST …/tool-results (checked here: the testing kit delivers through here too).
TOOL_RESULT = bodies.Body(
    fields=(
        bodies.Field(
            "event_id",
            "string",
            "event_id must be a string of 1 to 256 characters",
            required=True,
            min_length=1,
            max_length=256,
            description="Deduplicates the delivery: the same id again is a duplicate.",
        ),
        bodies.Field(
            "step",
            "string",
            "step must be the name of the tool step",
            required=True,
            min_length=1,
            max_length=128,
        ),
        bodies.Field(
            "status",
            "string",
            f"status must be one of {sorted(RESULT_STATUSES)}",
            required=True,
            choices=tuple(RESULT_STATUSES),
        ),
        bodies.Field(
            "output", "any", "", description="The tool's output when it succeeded (any JSON)."
        ),
        bodies.Field(
            "error", "string", "error must be a string", nullable=True, description="Why it failed."
        ),
    ),
)


def deliver_result(
    engine: Engine,
    project_id: str,
    run_id: uuid.UUID | str,
    *,
    event_id: Any,
    step: Any,
    status: Any,
    output: Any = None,
    error: Any = None,
) -> DeliveryOutcome:
    """Validate and deliver one result (the arguments may come straight from JSON: a
    :data:`TOOL_RESULT` body)."""
    TOOL_RESULT.parse({"event_id": event_id, "step": step, "status": status, "error": error})
    result: dict[str, Any] = {"status": RESULT_STATUSES[status]}
    if status == "succeeded":
        result["output"] = output
    else:
        result["error"] = (error or status)[:1000]
    request_digest = digest({"step": step, **result})
    with engine.connect() as conn:
        try:
            _check_step(conn, project_id, run_id, step)
            delivery = tools.deliver(
                conn, project_id, run_id, event_id, step, result, request_digest
            )
        except tools.RunNotFound:
            raise errors.NotFound("no such run in this project") from None
    if delivery.duplicate and not delivery.digest_matches:
        raise errors.IdempotencyKeyReused(
            "this event id was already delivered with a different result"
        )
    follow_up = None
    if not delivery.duplicate and not delivery.accepted:
        _check_conflict(engine, run_id, event_id, step, result)
        if result["status"] == saga.SUCCEEDED:
            follow_up = _compensate_late_success(engine, project_id, run_id, step, result)
    action = (
        "tool_result_duplicate"
        if delivery.duplicate
        else "tool_result_accepted"
        if delivery.accepted
        else "tool_result_late"
    )
    log.info(
        "tool result",
        extra={
            "action": action,
            "run_id": str(run_id),
            "project_id": project_id,
            "step": step,
            "event_id": event_id,
        },
    )
    return DeliveryOutcome(delivery, follow_up)


def _check_step(conn: Connection, project_id: str, run_id: uuid.UUID | str, step: str) -> None:
    """A result for a step the run's workflow version does not define is the caller's
    mistake: refused (422) before anything is written, so its event id stays unused. (A
    workflow this process does not have registered cannot be checked: its results are
    delivered as before.)"""
    name, version = tools.workflow_of(conn, project_id, run_id)
    try:
        workflow = registry.get(name, version)
    except registry.UnknownWorkflow:
        return
    if all(s.name != step for s in workflow.steps):
        raise errors.UnknownToolStep(
            f"workflow {name} v{version} has no step {step!r}; "
            f"its steps: {', '.join(s.name for s in workflow.steps)}"
        )


@dataclass(frozen=True)
class DeliveryOutcome:
    """What a delivery did, and the follow-up run started to undo a late success (if any)."""

    delivery: tools.Delivery
    compensation_run_id: uuid.UUID | None = None


LATE_COMPENSATION_WORKFLOW = "late-compensation"


def _compensate_late_success(
    engine: Engine, project_id: str, run_id: uuid.UUID | str, step: str, result: dict[str, Any]
) -> uuid.UUID | None:
    """Under the "compensate" policy, a success the saga gave up on gets undone by a
    follow-up run (exactly once per run and step: it is admitted like an event)."""
    with engine.connect() as conn:
        facts = tools.run_facts(conn, run_id)
    dispatches = [
        e for e in facts.journal if e.get("step") == step and e.get("status") == saga.DISPATCHED
    ]
    if not dispatches or dispatches[-1].get("late_result") != "compensate":
        return None
    workflow = registry.latest(LATE_COMPENSATION_WORKFLOW)
    assert workflow is not None
    key = f"late-compensation:{run_id}:{step}"
    original = {
        "run_id": str(run_id),
        "workflow": facts.workflow_name,
        "version": facts.workflow_version,
        "step": step,
        "input": facts.input,
        "output": result.get("output"),
    }
    with engine.connect() as conn:
        admitted = admission.admit(
            conn,
            admission.NewRun.of(
                workflow,
                project_id,
                {
                    "channel": "internal",
                    "provider_event_id": key,
                    "event": original,
                    "meta": {},
                    "project": {},
                },
                digest(original),
            ),
        )
    log.warning(
        "late success of a step the saga gave up on; compensating it",
        extra={
            "action": "late_success_compensating",
            "run_id": str(run_id),
            "step": step,
            "compensation_run_id": str(admitted.run_id),
        },
    )
    return admitted.run_id if admitted.created else None


def _check_conflict(
    engine: Engine, run_id: uuid.UUID | str, event_id: str, step: str, result: dict[str, Any]
) -> None:
    """A late result that contradicts the outcome recorded for the same attempt is a
    conflict: recorded, and the run goes to a person (never silently overwritten)."""
    with engine.connect() as conn:
        facts = tools.run_facts(conn, run_id)
        entries, version = facts.journal, facts.version
        dispatched = [
            e.get("attempt")
            for e in entries
            if e.get("step") == step and e.get("status") == saga.DISPATCHED
        ]
        # Reported outcomes only: a timeout's synthetic result carries no event id (a result
        # after a timeout is late, not a conflict).
        recorded = [
            e
            for e in entries
            if e.get("phase") == saga.TOOL_RESULT
            and e.get("step") == step
            and e.get("event_id")
            and dispatched
            and e.get("attempt") == dispatched[-1]
        ]
        if not recorded:
            return
        first = recorded[-1]
        if (first.get("status"), first.get("output")) == (result["status"], result.get("output")):
            return  # the same outcome again, under another event id: nothing new
        detail = {
            "step": step,
            "attempt": first.get("attempt"),
            "recorded": {"status": first.get("status"), "event_id": first.get("event_id")},
            "conflicting": {"status": result["status"], "event_id": event_id},
        }
        escalated = tools.record_conflict(
            conn,
            run_id,
            version,
            event_id,
            f"conflicting results for step {step}: {first.get('status')} then {result['status']}",
            detail,
        )
    log.warning(
        "conflicting tool result",
        extra={
            "action": "tool_result_conflict",
            "run_id": str(run_id),
            "step": step,
            "event_id": event_id,
            "escalated": escalated,
        },
    )
