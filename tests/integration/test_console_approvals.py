"""Deciding approvals from the ops console, through Flask's test client against a real
PostgreSQL and the test broker: from the run's page and from the approvals list, with the
approval step's role rule, CSRF, and a decision taken once."""

from __future__ import annotations

import uuid

import pytest

from awooop import secrets
from awooop.engine import runner
from tests.integration.conftest import queued_messages
from tests.support import db
from tests.support import runs as test_runs
from tests.support.console import hidden_fields, login, text


def waiting_run(engine, settings, project_id: str) -> uuid.UUID:
    run_id = test_runs.admit(engine, project_id, "test-approval")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_APPROVAL
    return run_id


def approval_of(engine, run_id) -> dict:
    (row,) = db.rows(engine, "SELECT * FROM awooop_approval WHERE run_id = :r", r=run_id)
    return row


def credential_id(engine, token: str) -> str:
    (row,) = db.rows(
        engine,
        "SELECT credential_id::text AS id FROM awooop_credential WHERE secret_hash = :h",
        h=secrets.sha256_hex(token),
    )
    return row["id"]


def decision_form(page: str, approval_id) -> dict[str, str]:
    """The fields of the page's decision form for ``approval_id``."""
    action = f'action="/console/approvals/{approval_id}"'
    assert action in page, "no decision form for this approval on the page"
    form = page[page.index(action) :]
    return hidden_fields(form[: form.index("</form>")])


def test_an_operator_approves_from_the_runs_page_and_the_run_completes(
    client, engine, settings, project, role_tokens, redis_client
):
    run_id = waiting_run(engine, settings, project["project_id"])
    approval = approval_of(engine, run_id)
    login(client, project["project_id"], role_tokens["operator"])
    form = decision_form(text(client.get(f"/console/runs/{run_id}")), approval["approval_id"])

    response = client.post(
        f"/console/approvals/{approval['approval_id']}",
        data={**form, "decision": "approve", "comment": "change window open"},
    )

    assert response.status_code == 303, text(response)
    assert response.headers["Location"] == f"/console/runs/{run_id}"
    page = text(client.get(response.headers["Location"]))
    assert f"Approved: restart-db on run {str(run_id)[:8]}" in page
    actor = f"api-token:{credential_id(engine, role_tokens['operator'])}"
    decided = approval_of(engine, run_id)
    assert (decided["status"], decided["decided_by"], decided["decided_via"]) == (
        "APPROVED",
        actor,
        "console",
    )
    assert decided["comment"] == "change window open"
    assert db.run(engine, run_id)["status"] == "RESUMED"
    (audit,) = [e for e in db.events(engine, run_id) if e["trigger"] == "approval"]
    assert (audit["actor"], audit["detail"]) == (actor, {"decision": "approved", "via": "console"})
    assert queued_messages(redis_client) == 1  # the resumed run is queued, as from the API
    runner.execute(engine, settings, run_id)
    assert db.run(engine, run_id)["status"] == "COMPLETED"


def test_an_admin_rejects_from_the_approvals_list_and_the_run_is_undone(
    client, engine, settings, project, role_tokens
):
    run_id = waiting_run(engine, settings, project["project_id"])
    approval_id = approval_of(engine, run_id)["approval_id"]
    login(client, project["project_id"], role_tokens["admin"])
    listing = text(client.get("/console/approvals"))
    assert str(run_id)[:8] in listing and "Restart db-1?" in listing

    response = client.post(
        f"/console/approvals/{approval_id}",
        data={**decision_form(listing, approval_id), "decision": "reject", "comment": "not now"},
    )

    assert (response.status_code, response.headers["Location"]) == (303, "/console/approvals")
    assert "No approval waits for a decision." in text(client.get("/console/approvals"))
    assert approval_of(engine, run_id)["status"] == "REJECTED"
    runner.execute(engine, settings, run_id)
    run = db.run(engine, run_id)
    assert (run["status"], run["failure_code"]) == ("FAILED", "E-APPROVAL-001")


def test_a_viewer_sees_no_form_and_its_post_is_a_403_that_changes_nothing(
    client, engine, settings, project, role_tokens
):
    run_id = waiting_run(engine, settings, project["project_id"])
    approval_id = approval_of(engine, run_id)["approval_id"]
    login(client, project["project_id"], role_tokens["viewer"])
    run_page = text(client.get(f"/console/runs/{run_id}"))
    listing = text(client.get("/console/approvals"))
    form = hidden_fields(listing)

    response = client.post(
        f"/console/approvals/{approval_id}", data={**form, "decision": "approve"}
    )

    assert f"/console/approvals/{approval_id}" not in run_page + listing
    assert "operator or admin only" in listing
    assert response.status_code == 403
    assert "you may not decide this approval" in text(response)
    assert approval_of(engine, run_id)["status"] == "PENDING"
    assert db.run(engine, run_id)["status"] == "WAITING_APPROVAL"


@pytest.mark.parametrize("csrf", [None, "forged"])
def test_a_decision_without_the_sessions_csrf_token_is_a_400_that_changes_nothing(
    client, engine, settings, project, csrf
):
    run_id = waiting_run(engine, settings, project["project_id"])
    approval_id = approval_of(engine, run_id)["approval_id"]
    login(client, project["project_id"], project["api_token"])
    form = decision_form(text(client.get("/console/approvals")), approval_id)
    if csrf is None:
        del form["csrf_token"]
    else:
        form["csrf_token"] = csrf

    response = client.post(
        f"/console/approvals/{approval_id}", data={**form, "decision": "approve"}
    )

    assert response.status_code == 400
    assert "This form has expired or did not come from this console" in text(response)
    assert approval_of(engine, run_id)["status"] == "PENDING"
    assert db.run(engine, run_id)["status"] == "WAITING_APPROVAL"


def test_a_second_decision_is_a_409_and_the_first_stands(client, engine, settings, project):
    run_id = waiting_run(engine, settings, project["project_id"])
    approval_id = approval_of(engine, run_id)["approval_id"]
    login(client, project["project_id"], project["api_token"])
    form = decision_form(text(client.get(f"/console/runs/{run_id}")), approval_id)
    client.post(f"/console/approvals/{approval_id}", data={**form, "decision": "approve"})
    version = db.run(engine, run_id)["version"]

    again = client.post(f"/console/approvals/{approval_id}", data={**form, "decision": "reject"})

    assert again.status_code == 409
    assert "this approval was already approved" in text(again)
    assert approval_of(engine, run_id)["status"] == "APPROVED"
    assert db.run(engine, run_id)["version"] == version


def test_another_projects_approval_is_not_found_nor_listed(client, engine, settings, project):
    from awooop import cli

    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    run_id = waiting_run(engine, settings, other["project_id"])
    approval_id = approval_of(engine, run_id)["approval_id"]
    login(client, project["project_id"], project["api_token"])
    listing = text(client.get("/console/approvals"))

    response = client.post(
        f"/console/approvals/{approval_id}", data={**hidden_fields(listing), "decision": "approve"}
    )

    assert str(run_id)[:8] not in listing
    assert response.status_code == 404
    assert approval_of(engine, run_id)["status"] == "PENDING"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"decision": "maybe"}, "The decision must be"),
        ({"decision": "approve", "comment": "x" * 2001}, "The comment is too long"),
    ],
)
def test_a_bad_decision_form_is_a_400_that_changes_nothing(
    client, engine, settings, project, fields, message
):
    run_id = waiting_run(engine, settings, project["project_id"])
    approval_id = approval_of(engine, run_id)["approval_id"]
    login(client, project["project_id"], project["api_token"])
    form = decision_form(text(client.get("/console/approvals")), approval_id)

    response = client.post(f"/console/approvals/{approval_id}", data={**form, **fields})

    assert response.status_code == 400
    assert message in text(response)
    assert approval_of(engine, run_id)["status"] == "PENDING"
