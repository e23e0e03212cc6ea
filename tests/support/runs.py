"""Admitting runs directly through the store (no HTTP), for lease and sweep tests."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from sqlalchemy import Engine

from awooop.config import Settings
from awooop.domain.workflow import Workflow
from awooop.engine import management, runner
from awooop.store import admission, operations
from awooop.testing import environment
from awooop.workflows import registry


def new_run(
    project_id: str,
    wf: Workflow,
    event: dict[str, Any] | None = None,
    channel: str = "api",
    traceparent: str | None = None,
) -> admission.NewRun:
    """A run of ``wf`` as the ingress admits it, under a fresh provider event id."""
    key = uuid.uuid4().hex
    run_input = {"channel": channel, "provider_event_id": key, "event": event or {}, "meta": {}}
    return environment.new_run(project_id, wf, run_input, traceparent)


def admit(
    engine: Engine,
    project_id: str,
    workflow: str = "noop-3",
    event: dict[str, Any] | None = None,
    channel: str = "api",
    traceparent: str | None = None,
) -> uuid.UUID:
    wf = registry.latest(workflow)
    assert wf is not None, workflow
    with engine.begin() as conn:
        result = admission.admit(conn, new_run(project_id, wf, event, channel, traceparent))
    assert result.created
    return result.run_id


def admit_many(
    engine: Engine, project_id: str, n: int, workflow: str = "noop-3"
) -> list[uuid.UUID]:
    return [admit(engine, project_id, workflow) for _ in range(n)]


def completed(
    engine: Engine,
    settings: Settings,
    project_id: str,
    workflow: str = "noop-3",
    event: dict[str, Any] | None = None,
) -> uuid.UUID:
    """A run admitted and driven to COMPLETED in this process."""
    run_id = admit(engine, project_id, workflow, event)
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    return run_id


def operate(
    engine: Engine,
    settings: Settings,
    project: dict,
    operation: str,
    run_id: uuid.UUID,
    actor: str = "alice",
    reason: str = "test",
) -> operations.OperationResult:
    """An operator's management operation on the run, with a fresh operation id."""
    return management.operate(
        engine,
        settings,
        operation,
        project["project_id"],
        run_id,
        operation_id=uuid.uuid4().hex,
        actor=actor,
        reason=reason,
    )


def execute_in_thread(
    engine: Engine, settings: Settings, run_id: uuid.UUID
) -> tuple[threading.Thread, list[runner.Outcome]]:
    """A worker driving ``run_id`` in a thread of this process; its outcome lands in the
    list when the thread ends. The caller waits for the moment it needs (a step reached)."""
    outcome: list[runner.Outcome] = []
    thread = threading.Thread(
        target=lambda: outcome.append(runner.execute(engine, settings, run_id))
    )
    thread.start()
    return thread, outcome
