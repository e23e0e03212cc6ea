"""Rerunning one finished run from its console page: the button, the confirmation, the new run
(as ``POST …/runs/{run_id}/rerun`` makes it), a double submit, and who may."""

from __future__ import annotations

from awooop.engine import runner
from tests.integration.conftest import queued_messages, queued_run_ids
from tests.support import db
from tests.support import runs as test_runs
from tests.support.console import confirm_form, hidden_fields, login, submit, text


def completed_run(engine, settings, project):
    return test_runs.completed(engine, settings, project["project_id"], event={"disk": "db-1"})


def reruns_of(engine, run_id) -> list[dict]:
    return db.rows(
        engine,
        "SELECT run_id, status, workflow_name, workflow_version, input "
        "FROM awooop_run_state WHERE rerun_of = :r",
        r=run_id,
    )


def test_an_operator_reruns_a_finished_run_from_its_page(
    operator, engine, settings, project, redis_client
):
    # Given a completed run, whose page offers a rerun
    original = completed_run(engine, settings, project)
    assert f'href="/console/runs/{original}/rerun?version=' in text(
        operator.get(f"/console/runs/{original}")
    )

    # When an operator confirms it with a reason
    confirm = text(operator.get(f"/console/runs/{original}/rerun"))
    assert "A new run of the same workflow and version starts with this run&#39;s input" in confirm
    response = submit(operator, original, "rerun", hidden_fields(confirm), "disk replaced")

    # Then a new run of the same workflow, version and input starts, linked to it, and its
    # message is sent
    (new,) = reruns_of(engine, original)
    assert (new["status"], new["workflow_name"], new["workflow_version"]) == (
        "PENDING",
        "noop-3",
        1,
    )
    assert new["input"] == db.run(engine, original)["input"]
    assert queued_messages(redis_client) == 1
    assert queued_run_ids(redis_client) == [str(new["run_id"])]
    (audit,) = [e for e in db.events(engine, new["run_id"]) if e["to_status"] == "PENDING"]
    assert audit["detail"]["reason"] == "disk replaced"
    # And the operator lands on the new run's page, which links back; the original's page
    # lists its rerun
    assert (response.status_code, response.headers["Location"]) == (
        303,
        f"/console/runs/{new['run_id']}",
    )
    page = text(operator.get(response.headers["Location"]))
    assert f"Rerun: started as this run, a rerun of {str(original)[:8]}." in page
    assert f'href="/console/runs/{original}"' in page
    assert f'href="/console/runs/{new["run_id"]}"' in text(
        operator.get(f"/console/runs/{original}")
    )
    # And the new run runs
    assert runner.execute(engine, settings, new["run_id"]) == runner.Outcome.COMPLETED


def test_submitting_the_rerun_form_twice_makes_one_run(operator, engine, settings, project):
    original = completed_run(engine, settings, project)
    form = confirm_form(operator, original, "rerun")

    first = submit(operator, original, "rerun", form, "once")
    again = submit(operator, original, "rerun", form, "once")

    (new,) = reruns_of(engine, original)
    assert (
        first.headers["Location"] == again.headers["Location"] == f"/console/runs/{new['run_id']}"
    )
    page = text(operator.get(again.headers["Location"]))
    assert "This form was already submitted: the run was rerun once, as this run." in page


def test_an_unfinished_run_offers_no_rerun_and_refuses_one(operator, engine, project):
    pending = test_runs.admit(engine, project["project_id"])
    page = text(operator.get(f"/console/runs/{pending}"))
    assert f"/console/runs/{pending}/rerun" not in page

    response = operator.post(
        f"/console/runs/{pending}/rerun", data={**hidden_fields(page), "operation_id": "r-1"}
    )

    assert response.status_code == 409
    assert "E-RERUN-001" in text(response)
    assert "only a finished run" in text(response)
    assert reruns_of(engine, pending) == []


def test_a_viewer_is_offered_no_rerun_and_cannot_rerun(
    client, engine, settings, project, role_tokens
):
    original = completed_run(engine, settings, project)
    login(client, project["project_id"], role_tokens["viewer"])
    page = text(client.get(f"/console/runs/{original}"))
    assert f"/console/runs/{original}/rerun" not in page

    confirm = client.get(f"/console/runs/{original}/rerun")
    act = client.post(
        f"/console/runs/{original}/rerun", data={**hidden_fields(page), "operation_id": "v-1"}
    )

    assert (confirm.status_code, act.status_code) == (403, 403)
    assert reruns_of(engine, original) == []
