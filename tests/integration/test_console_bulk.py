"""Bulk actions from the ops console's runs list, through Flask's test client against a real
PostgreSQL and the test broker: the confirmation's exact count, each run through its own
operation (audit rows, per-run rules), skipped counts, the bound, roles and CSRF."""

from __future__ import annotations

import re
import uuid

import pytest
from werkzeug.datastructures import MultiDict

from awooop.engine import runner
from awooop.web.console import bulk
from tests.integration.conftest import queued_messages
from tests.support import db
from tests.support import overview as seed
from tests.support import runs as test_runs
from tests.support.console import hidden_fields, login, text

_COUNT = re.compile(r'<strong class="bulk-count">(\d+)</strong>')


def confirm(client, segment: str, **filters: str) -> tuple[int, str, list[tuple[str, str]]]:
    """The confirmation page: the count it shows, its text, and its form's fields in order."""
    response = client.get(f"/console/bulk/{segment}", query_string=filters)
    assert response.status_code == 200, text(response)
    page = text(response)
    (count,) = _COUNT.findall(page)
    fields = re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', page)
    return int(count), page, fields


def submit(client, segment: str, fields: list[tuple[str, str]], reason: str = "bulk test"):
    return client.post(f"/console/bulk/{segment}", data=MultiDict([*fields, ("reason", reason)]))


def flash(client, response) -> str:
    assert response.status_code == 303, text(response)
    page = text(client.get(response.headers["Location"]))
    (message,) = re.findall(r'<p class="flash info" role="status">([^<]*)</p>', page)
    return message


def operator_rows(engine, run_id) -> list[dict]:
    return [e for e in db.events(engine, run_id) if e["trigger"] == "operator"]


def test_the_runs_page_offers_bulk_actions_with_its_filters(operator):
    page = text(operator.get("/console/runs", query_string={"workflow": "noop-3"}))

    for segment in ("cancel", "pause", "resume"):
        assert f'href="/console/bulk/{segment}?workflow=noop-3"' in page
    assert "at most 1000 runs per action" in page


def test_bulk_cancel_shows_the_exact_count_then_cancels_each_matching_run_with_its_audit_row(
    operator, engine, project, redis_client
):
    matching = test_runs.admit_many(engine, project["project_id"], 3, "noop-3")
    other = test_runs.admit(engine, project["project_id"], "test-fail")

    count, page, fields = confirm(operator, "cancel", workflow="noop-3")
    response = submit(operator, "cancel", fields, "bad deploy")

    assert count == 3
    assert "workflow=noop-3" in page and "At most 1000 runs per action" in page
    assert flash(operator, response) == (
        "Cancel: 3 of 3 matching runs acted upon; 0 skipped because their state did not allow it."
    )
    assert response.headers["Location"] == "/console/runs?workflow=noop-3"
    operation_id = dict(fields)["operation_id"]
    for run_id in matching:
        assert db.run(engine, run_id)["saga_status"] == "CANCELLING"
        (audit,) = operator_rows(engine, run_id)
        assert audit["trigger_id"] == operation_id
        assert audit["detail"] == {"operation": "cancel", "reason": "bad deploy"}
        assert audit["actor"].startswith("api-token:")
    assert db.run(engine, other)["saga_status"] == "RUNNING"
    assert operator_rows(engine, other) == []
    assert queued_messages(redis_client) == 3  # each cancelled run nudged, as one by one


def test_runs_whose_state_does_not_allow_the_action_are_skipped_and_counted(
    operator, engine, settings, project
):
    pending = test_runs.admit_many(engine, project["project_id"], 2, "noop-3")
    finished = test_runs.admit_many(engine, project["project_id"], 2, "noop-3")
    for run_id in finished:
        runner.execute(engine, settings, run_id)
        assert db.run(engine, run_id)["status"] == "COMPLETED"

    count, _, fields = confirm(operator, "pause", workflow="noop-3")
    message = flash(operator, submit(operator, "pause", fields))

    assert count == 4
    assert message == (
        "Pause: 2 of 4 matching runs acted upon; 2 skipped because their state did not allow it."
    )
    assert [db.run(engine, r)["control_state"] for r in pending] == ["PAUSED", "PAUSED"]
    assert all(operator_rows(engine, r) == [] for r in finished)


def test_bulk_resume_resumes_the_paused_and_skips_the_active(operator, engine, settings, project):
    runs = test_runs.admit_many(engine, project["project_id"], 3, "noop-3")
    for run_id in runs[:2]:
        test_runs.operate(engine, settings, project, "pause", run_id)

    count, _, fields = confirm(operator, "resume", status="PENDING")
    message = flash(operator, submit(operator, "resume", fields))

    assert count == 3
    assert message.startswith("Resume: 2 of 3 matching runs acted upon; 1 skipped")
    assert {db.run(engine, r)["control_state"] for r in runs} == {"ACTIVE"}


def test_a_bulk_action_takes_at_most_the_limit_and_says_so(operator, engine, project, monkeypatch):
    monkeypatch.setattr(bulk, "BULK_LIMIT", 2)
    runs = test_runs.admit_many(engine, project["project_id"], 3, "noop-3")

    count, page, fields = confirm(operator, "pause", workflow="noop-3")
    message = flash(operator, submit(operator, "pause", fields))

    assert count == 2
    assert "more than 2 match: this action takes at most 2 runs at a time" in page
    assert message.startswith("Pause: 2 of 2 matching runs acted upon")
    states = [db.run(engine, r)["control_state"] for r in runs]
    assert sorted(states) == ["ACTIVE", "PAUSED", "PAUSED"]
    assert states[0] == "ACTIVE"  # the newest first: the oldest is left for the next one


def test_a_run_admitted_after_the_confirmation_is_not_touched(operator, engine, project):
    before = test_runs.admit(engine, project["project_id"], "noop-3")
    count, _, fields = confirm(operator, "cancel", workflow="noop-3")
    after = test_runs.admit(engine, project["project_id"], "noop-3")

    message = flash(operator, submit(operator, "cancel", fields))

    assert count == 1 and message.startswith("Cancel: 1 of 1 matching runs acted upon")
    assert db.run(engine, before)["saga_status"] == "CANCELLING"
    assert db.run(engine, after)["saga_status"] == "RUNNING"


def test_submitting_a_bulk_form_twice_does_each_run_once(operator, engine, project):
    runs = test_runs.admit_many(engine, project["project_id"], 2, "noop-3")
    _, _, fields = confirm(operator, "pause", workflow="noop-3")
    flash(operator, submit(operator, "pause", fields))
    versions = [db.run(engine, r)["version"] for r in runs]

    message = flash(operator, submit(operator, "pause", fields))

    assert message == (
        "Pause: 0 of 2 matching runs acted upon; 0 skipped because their state did not allow "
        "it. 2 had already been done by this same form, not again."
    )
    assert [db.run(engine, r)["version"] for r in runs] == versions
    assert all(len(operator_rows(engine, r)) == 1 for r in runs)


def test_no_matching_run_offers_nothing_to_confirm(operator, project):
    count, page, fields = confirm(operator, "cancel", workflow="no-such-workflow")

    assert count == 0
    assert "No run matches these filters: nothing to do." in page
    assert "operation_id" not in dict(fields)


def test_a_viewer_gets_no_bulk_actions_and_a_403_that_changes_nothing(
    client, engine, project, role_tokens
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    login(client, project["project_id"], role_tokens["viewer"])
    runs_page = text(client.get("/console/runs"))
    form = [
        *hidden_fields(runs_page).items(),
        ("operation_id", "bulk-x"),
        ("as_of", "2100-01-01T00:00:00+00:00"),
    ]

    page = client.get("/console/bulk/cancel")
    act = client.post("/console/bulk/cancel", data=MultiDict(form))

    assert "/console/bulk/" not in runs_page
    assert (page.status_code, act.status_code) == (403, 403)
    assert "A viewer token can look but not act" in text(act)
    assert db.run(engine, run_id)["saga_status"] == "RUNNING"
    assert operator_rows(engine, run_id) == []


@pytest.mark.parametrize("csrf", [None, "forged"])
def test_a_bulk_post_without_the_sessions_csrf_token_is_a_400_that_changes_nothing(
    operator, engine, project, csrf
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    _, _, fields = confirm(operator, "cancel")
    fields = [(k, v) for k, v in fields if k != "csrf_token"]
    if csrf is not None:
        fields.append(("csrf_token", csrf))

    response = submit(operator, "cancel", fields)

    assert response.status_code == 400
    assert "This form has expired or did not come from this console" in text(response)
    assert db.run(engine, run_id)["saga_status"] == "RUNNING"
    assert operator_rows(engine, run_id) == []


@pytest.mark.parametrize(
    ("segment", "query", "status"),
    [("rerun-everything", {}, 404), ("cancel", {"status": "SLEEPING"}, 400)],
)
def test_an_unknown_action_or_a_bad_filter_is_refused(operator, segment, query, status):
    response = operator.get(f"/console/bulk/{segment}", query_string=query)

    assert response.status_code == status
    assert response.mimetype == "text/html"


def test_bulk_actions_never_reach_another_projects_runs(operator, engine, settings):
    from awooop import cli

    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    seed.runs(engine, other["project_id"], "PENDING", 2)

    count, _, _ = confirm(operator, "cancel")

    assert count == 0
    assert db.count(engine, "awooop_run_event", "trigger = 'operator'") == 0


def test_an_admin_reruns_the_finished_runs_a_filter_matches_once_paced_at_the_rerun_rate(
    client, engine, settings, project, role_tokens
):
    finished = test_runs.admit_many(engine, project["project_id"], 2, "noop-3")
    for run_id in finished:
        runner.execute(engine, settings, run_id)
        assert db.run(engine, run_id)["status"] == "COMPLETED"
    pending = test_runs.admit(engine, project["project_id"], "noop-3")
    login(client, project["project_id"], role_tokens["admin"])

    count, page, fields = confirm(client, "rerun", workflow="noop-3")
    message = flash(client, submit(client, "rerun", fields, "fixed the check"))
    again = flash(client, submit(client, "rerun", fields, "fixed the check"))

    assert count == 2  # the unfinished run cannot be rerun and is not counted
    assert "finished runs only" in page
    assert message == (
        "Rerun: 2 of 2 matching runs acted upon; 0 skipped because their state did not allow it."
    )
    assert again.endswith("2 had already been done by this same form, not again.")
    reruns = db.rows(
        engine,
        "SELECT run_id, rerun_of, available_at FROM awooop_run_state"
        " WHERE rerun_of IS NOT NULL ORDER BY available_at",
    )
    assert sorted(r["rerun_of"] for r in reruns) == sorted(finished)
    assert pending not in {r["rerun_of"] for r in reruns}
    gap = (reruns[1]["available_at"] - reruns[0]["available_at"]).total_seconds()
    assert gap == pytest.approx(1 / settings.rerun_rate_per_second, abs=0.01)


def test_an_operator_is_not_offered_the_bulk_rerun_and_is_refused_it(operator, engine, project):
    runs_page = text(operator.get("/console/runs"))

    assert "/console/bulk/rerun" not in runs_page
    assert operator.get("/console/bulk/rerun").status_code == 403


def test_the_runs_page_finds_runs_by_tag_event_id_and_key_and_bulk_actions_keep_the_filter(
    operator, engine, settings, project
):
    def tagged(service: str) -> uuid.UUID:
        run_id = test_runs.admit(
            engine, project["project_id"], "test-tags", {"tags": {"service": service}}
        )
        runner.execute(engine, settings, run_id)
        return run_id

    db_run, web_run = tagged("db-1"), tagged("web-1")
    event_id = db.run(engine, web_run)["input"]["provider_event_id"]

    by_tag = text(operator.get("/console/runs", query_string={"tag": "service:db-1"}))
    by_event = text(operator.get("/console/runs", query_string={"provider_event_id": event_id}))
    by_key = text(operator.get("/console/runs", query_string={"idempotency_key": "no-such-key"}))
    bad = operator.get("/console/runs", query_string={"tag": "service"})

    assert str(db_run) in by_tag and str(web_run) not in by_tag
    assert 'value="service:db-1"' in by_tag
    assert 'href="/console/bulk/cancel?tag=service:db-1"' in by_tag
    assert str(web_run) in by_event and str(db_run) not in by_event
    assert str(db_run) not in by_key and str(web_run) not in by_key
    assert bad.status_code == 400 and "tag must be KEY:VALUE" in text(bad)
    count, _, fields = confirm(operator, "pause", tag="service:db-1")
    assert count == 1 and ("tag", "service:db-1") in fields
