"""What the console's forms carry that PostgreSQL cannot store — a NUL character in a reason,
a comment or an operation id — is a 400 page that says so, and nothing is written. (It was a
500: the API refuses such text in its bodies and headers, the console's forms did not.)"""

from __future__ import annotations

from werkzeug.datastructures import MultiDict

from awooop.engine import runner
from tests.support import db
from tests.support import runs as test_runs
from tests.support.console import confirm_form, hidden_fields, submit, text

NUL = "disk\x00replaced"


def test_a_nul_in_an_actions_reason_is_a_400_and_changes_nothing(operator, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    form = confirm_form(operator, run_id, "pause")

    response = submit(operator, run_id, "pause", form, NUL)

    assert response.status_code == 400
    assert "The reason must not contain NUL characters" in text(response)
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def test_a_nul_in_an_operation_id_is_a_refused_form(operator, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    form = {**confirm_form(operator, run_id, "pause"), "operation_id": NUL}

    response = submit(operator, run_id, "pause", form, "why")

    assert response.status_code == 400
    assert "E-CONSOLE-001" in text(response)
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def test_a_nul_in_a_reruns_reason_is_a_400_and_makes_no_run(operator, engine, settings, project):
    run_id = test_runs.completed(engine, settings, project["project_id"])
    form = confirm_form(operator, run_id, "rerun")

    response = submit(operator, run_id, "rerun", form, NUL)

    assert response.status_code == 400
    assert "The reason must not contain NUL characters" in text(response)
    assert db.rows(engine, "SELECT 1 FROM awooop_run_state WHERE rerun_of = :r", r=run_id) == []


def test_a_nul_in_a_bulk_actions_reason_is_a_400_and_changes_nothing(operator, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    page = text(operator.get("/console/bulk/pause", query_string={"workflow": "noop-3"}))
    fields = [*hidden_fields(page).items(), ("reason", NUL)]

    response = operator.post("/console/bulk/pause", data=MultiDict(fields))

    assert response.status_code == 400
    assert "The reason must not contain NUL characters" in text(response)
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def test_a_nul_in_an_approvals_comment_is_a_400_and_decides_nothing(
    operator, engine, settings, project
):
    run_id = test_runs.admit(engine, project["project_id"], "test-approval")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL
    (approval,) = db.rows(engine, "SELECT * FROM awooop_approval WHERE run_id = :r", r=run_id)
    page = text(operator.get(f"/console/runs/{run_id}"))
    fields = {**hidden_fields(page), "decision": "approve", "comment": NUL}

    response = operator.post(f"/console/approvals/{approval['approval_id']}", data=fields)

    assert response.status_code == 400
    assert "The comment must not contain NUL characters" in text(response)
    (still,) = db.rows(engine, "SELECT status FROM awooop_approval WHERE run_id = :r", r=run_id)
    assert still["status"] == "PENDING"
