"""What the approval rows say once a run stops waiting: an escalation opens an intervention
that the operator's decision settles; a cancel or the deadline supersedes a pending approval.
And the run's detail says when its lease was last renewed."""

from __future__ import annotations

from pathlib import Path

import pytest

from awooop.engine import runner
from tests.support import db, tokens, waiting
from tests.support import runs as test_runs


def _operate(engine, settings, project, operation, run_id) -> None:
    assert test_runs.operate(
        engine, settings, project, operation, run_id, reason="looked at the disk"
    ).applied


def _approvals(engine, run_id) -> list[dict]:
    return db.rows(
        engine,
        "SELECT kind, step, status, decided_by, decided_via, comment, prompt, expires_at"
        " FROM awooop_approval WHERE run_id = :r ORDER BY created_at",
        r=run_id,
    )


@pytest.mark.parametrize(
    ("operation", "settled"), [("retry_resolution", "APPROVED"), ("manual_close", "REJECTED")]
)
def test_an_escalation_opens_an_intervention_that_the_operator_settles(
    engine, project, settings, tmp_path: Path, operation, settled
):
    settings = settings.__class__(**{**settings.__dict__, "manual_close_enabled": True})
    marker = tmp_path / "halted"
    run_id = test_runs.admit(
        engine, project["project_id"], "test-halt-once", {"marker": str(marker)}
    )
    assert runner.execute(engine, settings, run_id) == runner.Outcome.ESCALATED

    (opened,) = _approvals(engine, run_id)
    assert (opened["kind"], opened["step"], opened["status"], opened["expires_at"]) == (
        "intervention",
        "check",
        "PENDING",
        None,
    )
    assert "disk state unknown" in opened["prompt"]

    _operate(engine, settings, project, operation, run_id)

    (decided,) = _approvals(engine, run_id)
    assert (decided["status"], decided["decided_by"], decided["decided_via"]) == (
        settled,
        "alice",
        "operator",
    )
    assert decided["comment"] == "looked at the disk"


def test_a_cancel_supersedes_the_pending_approval(engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-approval")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL

    _operate(engine, settings, project, "cancel", run_id)

    (approval,) = _approvals(engine, run_id)
    assert (approval["kind"], approval["status"], approval["decided_via"]) == (
        "approval",
        "SUPERSEDED",
        "operator",
    )
    assert runner.execute(engine, settings, run_id) == runner.Outcome.CANCELLED


def test_the_run_deadline_supersedes_the_pending_approval(engine, project, settings):
    run_id = test_runs.admit(
        engine, project["project_id"], "test-held-approval-deadline", {"gate": "open"}
    )
    import threading

    from tests.support import workflows as wf

    wf.GATES["open"] = threading.Event()
    wf.GATES["open"].set()
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL

    waiting.fire_when_due(engine, settings, run_id, "deadline")

    (approval,) = _approvals(engine, run_id)
    assert (approval["status"], approval["decided_via"]) == ("SUPERSEDED", "timer")


def test_the_run_detail_says_when_the_lease_was_last_renewed(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    viewer = tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))

    body = client.get(f"/v1/projects/{project['project_id']}/runs/{run_id}", headers=viewer)

    assert body.get_json()["heartbeat_at"] == db.run(engine, run_id)["heartbeat_at"].isoformat()
