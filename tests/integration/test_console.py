"""The ops console through Flask's test client, against a real PostgreSQL and the test broker:
sign-in and sessions, every page for every role, CSRF, role and tenant checks, stale pages
and double submits."""

from __future__ import annotations

import dataclasses
import html
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text as sql

from awooop import secrets
from awooop.config import Settings
from awooop.engine import management, runner
from awooop.web.app import create_app
from awooop.web.console import views as console_views
from tests.integration.conftest import queued_messages
from tests.support import approvals as approval_setup
from tests.support import db, requests
from tests.support import runs as test_runs
from tests.support.console import confirm_form, hidden_fields, login, submit, text


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # No auth cache: a revoked token must end its session on the next request.
    return dataclasses.replace(settings, auth_cache_seconds=0)


def halted_run(engine, settings, project, tmp_path) -> uuid.UUID:
    """A run stopped for a person going forward (retry resolution lets it complete)."""
    run_id = test_runs.admit(
        engine, project["project_id"], "test-halt-once", {"marker": str(tmp_path / "halted")}
    )
    runner.execute(engine, settings, run_id)
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"]) == ("WAITING_APPROVAL", "MANUAL_INTERVENTION")
    return run_id


def operator_audit_rows(engine, run_id) -> list[dict]:
    return [e for e in db.events(engine, run_id) if e["trigger"] == "operator"]


# --- Signing in and out ---------------------------------------------------------------------


def test_a_page_without_a_session_redirects_to_sign_in(client):
    response = client.get("/console/runs?status=FAILED")

    assert response.status_code == 303
    assert response.headers["Location"] == "/console/login?next=/console/runs?status%3DFAILED"


def test_sign_in_with_an_operator_token_opens_the_page_asked_for(client, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])

    response = login(client, project["project_id"], project["api_token"], f"/console/runs/{run_id}")

    assert response.status_code == 303
    assert response.headers["Location"] == f"/console/runs/{run_id}"
    page = client.get(response.headers["Location"])
    assert page.status_code == 200
    assert str(run_id) in text(page)


@pytest.mark.parametrize(
    "target", ["//evil.example/console/runs", "https://evil.example/x", "/v1/x"]
)
def test_sign_in_never_redirects_off_the_console(client, project, target):
    response = login(client, project["project_id"], project["api_token"], target)

    assert response.headers["Location"] == "/console/"


@pytest.mark.parametrize("which", ["wrong token", "unknown project", "another project's token"])
def test_a_bad_sign_in_is_refused_alike_and_starts_no_session(client, settings, project, which):
    from awooop import cli

    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    project_id, token = {
        "wrong token": (project["project_id"], "not-a-token"),
        "unknown project": ("no-such-project", project["api_token"]),
        "another project's token": (project["project_id"], other["api_token"]),
    }[which]

    response = login(client, project_id, token)

    assert response.status_code == 401
    assert "Unknown project, or a token that is not one of its active API tokens." in text(response)
    assert client.get("/console/runs").status_code == 303


def test_an_ingest_token_cannot_sign_in(client, project, role_tokens):
    response = login(client, project["project_id"], role_tokens["ingest"])

    assert response.status_code == 403
    assert "cannot use the console" in text(response)
    assert client.get("/console/runs").status_code == 303


def test_the_session_cookie_is_signed_http_only_lax_and_holds_no_token(client, project):
    response = login(client, project["project_id"], project["api_token"])

    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("awooop_console=")
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/console" in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    app = client.application
    data = app.session_interface.get_signing_serializer(app).loads(value)
    assert set(data) == {"project_id", "credential_id", "role", "csrf", "_permanent"}
    assert (data["project_id"], data["role"]) == (project["project_id"], "operator")
    assert project["api_token"] not in value and project["api_token"] not in str(data)


def test_a_tampered_session_cookie_is_not_a_session(client, project):
    login(client, project["project_id"], project["api_token"])
    cookie = client.get_cookie("awooop_console", path="/console")
    client.set_cookie("awooop_console", cookie.value[:-2] + "xx", path="/console")

    assert client.get("/console/runs").status_code == 303


def test_sign_out_ends_the_session(operator):
    page = text(operator.get("/console/runs"))

    response = operator.post("/console/logout", data=hidden_fields(page))

    assert (response.status_code, response.headers["Location"]) == (303, "/console/login")
    assert operator.get("/console/runs").status_code == 303


def test_a_revoked_token_ends_its_sessions(operator, engine, project):
    with engine.connect() as conn:
        conn.execute(
            sql("UPDATE awooop_credential SET revoked_at = now() WHERE project_id = :p"),
            {"p": project["project_id"]},
        )

    response = operator.get("/console/runs")

    assert response.status_code == 303
    page = text(operator.get(response.headers["Location"]))
    assert "Your session has ended: its token was revoked." in page


# --- Pages, by role -------------------------------------------------------------------------


@pytest.fixture
def runs_of_every_kind(client, engine, settings, project, tmp_path):
    """A halted run (manual intervention), a run waiting for an approval whose prompt is in
    the outbox (admitted over the API: the run takes the project's notify_url along), and a
    finished one."""
    approval_setup.configure(
        engine,
        settings,
        project["project_id"],
        workflow="test-approval",
        config={"notify_url": "http://127.0.0.1:9/hook"},
    )
    halted = halted_run(engine, settings, project, tmp_path)
    path, headers, body = requests.api(project)
    waiting = uuid.UUID(client.post(path, headers=headers, data=body).get_json()["run_id"])
    runner.execute(engine, settings, waiting)
    done = test_runs.admit(engine, project["project_id"], "noop-3")
    runner.execute(engine, settings, done)
    return {"halted": halted, "waiting": waiting, "done": done}


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_page_renders_for_every_role(client, project, role_tokens, runs_of_every_kind, role):
    login(client, project["project_id"], role_tokens[role])
    halted = runs_of_every_kind["halted"]

    runs = client.get("/console/runs")
    queue = client.get("/console/interventions")
    detail = client.get(f"/console/runs/{halted}")

    assert [runs.status_code, queue.status_code, detail.status_code] == [200, 200, 200]
    assert all(str(r)[:8] in text(runs) for r in runs_of_every_kind.values())
    assert str(halted)[:8] in text(queue)
    assert str(runs_of_every_kind["done"])[:8] not in text(queue)
    assert "Retry resolution" in text(queue)
    assert "step check halted: disk state unknown: a person must look" in text(detail)
    has_button = f"/console/runs/{halted}/retry-resolution?version=" in text(detail)
    assert has_button == (role != "viewer")
    assert ("you can look, not act" in text(detail)) == (role == "viewer")


def test_run_detail_shows_the_journal_approvals_outbox_and_audit_trail(
    operator, engine, runs_of_every_kind
):
    run_id = runs_of_every_kind["waiting"]

    page = text(operator.get(f"/console/runs/{run_id}"))

    # the journal: the prepare step succeeded, the approval was requested
    assert page.count('<li class="t-forward">') == 2
    assert "prepare" in page and "SUCCEEDED" in page and "REQUESTED" in page
    # the approval row, without its token hash
    assert "restart-db" in page and "PENDING" in page
    # (the escalated run of the fixture has an intervention row of its own)
    (token_hash,) = [
        r["token_hash"]
        for r in db.rows(
            engine, "SELECT token_hash FROM awooop_approval WHERE run_id = :r", r=run_id
        )
    ]
    assert token_hash not in page
    # the prompt in the outbox
    assert "approval_prompt" in page and "webhook" in page
    # the audit trail: admission, claim, the wait
    for event in db.events(engine, run_id):
        assert f"<td>{event['seq']}</td>" in page
    assert "WAITING_APPROVAL" in page


def test_pages_carry_a_strict_content_security_policy(operator):
    response = operator.get("/console/runs")

    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    assert "<script" not in text(response)
    assert response.headers["Cache-Control"] == "no-store"


def test_run_list_filters_and_cursor_pages(operator, engine, project, monkeypatch):
    monkeypatch.setattr(console_views, "PAGE_SIZE", 2)
    noop = [test_runs.admit(engine, project["project_id"], "noop-3") for _ in range(3)]
    other = test_runs.admit(engine, project["project_id"], "test-fail")

    first = text(operator.get("/console/runs", query_string={"workflow": "noop-3", "status": ""}))
    (next_url,) = [part for part in first.split('"') if "cursor=" in part]
    second = text(operator.get(html.unescape(next_url)))

    shown = [r for r in noop if str(r)[:8] in first], [r for r in noop if str(r)[:8] in second]
    assert sorted(map(len, shown)) == [1, 2] and set(shown[0]) | set(shown[1]) == set(noop)
    assert str(other)[:8] not in first + second
    assert "« First page" in second and "Next page" not in second


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"status": "SLEEPING"}, "status &#39;SLEEPING&#39; is not one of"),
        ({"created_from": "yesterday"}, "created_from must be a time like"),
        ({"cursor": "not-ours"}, "cursor is not one this list returned"),
        ({"colour": "red"}, "unknown query parameter &#39;colour&#39;"),
    ],
)
def test_bad_filters_get_a_clear_400_page(operator, query, message):
    response = operator.get("/console/runs", query_string=query)

    assert response.status_code == 400
    assert response.mimetype == "text/html"
    assert message in text(response)
    assert "Traceback" not in text(response)


def test_times_without_an_offset_are_utc(operator, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    second = db.run(engine, run_id)["created_at"].astimezone(UTC).replace(microsecond=0)

    def listed(until: datetime) -> bool:
        query = {"created_until": until.strftime("%Y-%m-%dT%H:%M:%S")}  # as datetime-local
        return str(run_id)[:8] in text(operator.get("/console/runs", query_string=query))

    assert (listed(second), listed(second + timedelta(seconds=1))) == (False, True)


def test_another_projects_run_is_not_found(operator, engine, settings):
    from awooop import cli

    other = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    run_id = test_runs.admit(engine, other["project_id"])
    form = hidden_fields(text(operator.get("/console/runs")))

    pages = [
        operator.get(f"/console/runs/{run_id}"),
        operator.get(f"/console/runs/{run_id}/pause"),
        operator.post(f"/console/runs/{run_id}/pause", data={**form, "operation_id": "x"}),
        operator.get("/console/runs/not-a-uuid"),
    ]

    assert [p.status_code for p in pages] == [404, 404, 404, 404]
    assert all("No such run in this project." in text(p) for p in pages)
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def test_an_unknown_console_page_is_an_html_404_and_the_api_stays_json(operator):
    page = operator.get("/console/nothing-here")
    api = operator.get("/v1/nothing-here")

    assert (page.status_code, page.mimetype) == (404, "text/html")
    assert (api.status_code, api.mimetype) == (404, "application/json")


# --- Acting ---------------------------------------------------------------------------------


def test_retry_from_the_console_lets_the_halted_run_complete(
    operator, engine, settings, project, role_tokens, tmp_path, redis_client
):
    run_id = halted_run(engine, settings, project, tmp_path)
    version = db.run(engine, run_id)["version"]
    form = confirm_form(operator, run_id, "retry-resolution", version=version)

    response = submit(operator, run_id, "retry-resolution", form, "disk checked by hand")

    assert (response.status_code, response.headers["Location"]) == (
        303,
        f"/console/runs/{run_id}",
    )
    page = text(operator.get(response.headers["Location"]))
    assert "Retry resolution: done. The run is now RESUMED / WAITING_RESOLUTION" in page
    assert queued_messages(redis_client) == 1  # the nudge, as from the JSON endpoint
    (audit,) = operator_audit_rows(engine, run_id)
    (credential,) = db.rows(
        engine,
        "SELECT credential_id::text AS id FROM awooop_credential WHERE secret_hash = :h",
        h=secrets.sha256_hex(role_tokens["operator"]),
    )
    assert audit["actor"] == f"api-token:{credential['id']}"
    assert audit["detail"] == {"operation": "retry_resolution", "reason": "disk checked by hand"}
    runner.execute(engine, settings, run_id)
    assert db.run(engine, run_id)["status"] == "COMPLETED"


def test_submitting_the_same_form_twice_is_one_effect_and_one_audit_row(
    operator, engine, settings, project, tmp_path
):
    run_id = halted_run(engine, settings, project, tmp_path)
    form = confirm_form(operator, run_id, "retry-resolution")

    first = submit(operator, run_id, "retry-resolution", form, "once")
    version = db.run(engine, run_id)["version"]
    again = submit(operator, run_id, "retry-resolution", form, "once")

    assert (first.status_code, again.status_code) == (303, 303)
    assert db.run(engine, run_id)["version"] == version
    assert len(operator_audit_rows(engine, run_id)) == 1
    page = text(operator.get(again.headers["Location"]))
    assert "This form was already submitted: the operation was done once, not again." in page


def test_a_stale_page_is_refused_with_the_run_changed_message(operator, engine, settings, project):
    run_id = test_runs.admit(engine, project["project_id"])
    form = confirm_form(operator, run_id, "pause")
    management.operate(
        engine, settings, "cancel", project["project_id"], run_id, operation_id="c", actor="bob"
    )

    response = submit(operator, run_id, "pause", form, "too late")

    assert response.status_code == 409
    page = text(response)
    assert "The run changed since you looked at it" in page
    assert "Nothing was done. Review the run and try again." in page
    assert f'href="/console/runs/{run_id}"' in page
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def test_the_confirm_page_points_out_a_change_since_the_run_page(
    operator, engine, settings, project
):
    run_id = test_runs.admit(engine, project["project_id"])
    seen = {"version": db.run(engine, run_id)["version"]}
    before = text(operator.get(f"/console/runs/{run_id}/cancel", query_string=seen))
    management.operate(
        engine, settings, "pause", project["project_id"], run_id, operation_id="p", actor="bob"
    )

    after = text(operator.get(f"/console/runs/{run_id}/cancel", query_string=seen))

    assert "The run changed since its page was loaded" not in before
    assert "The run changed since its page was loaded" in after
    assert hidden_fields(after)["expected_version"] == str(db.run(engine, run_id)["version"])


def test_an_operation_the_run_is_not_ready_for_is_a_clear_409(operator, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    form = confirm_form(operator, run_id, "retry-compensation")

    response = submit(operator, run_id, "retry-compensation", form, "")

    assert response.status_code == 409
    assert "cannot retry_compensation a run that is PENDING / RUNNING / ACTIVE" in text(response)
    assert operator_audit_rows(engine, run_id) == []


@pytest.mark.parametrize("csrf", [None, "", "forged", "é"])
def test_a_post_without_the_sessions_csrf_token_is_refused(operator, engine, project, csrf):
    run_id = test_runs.admit(engine, project["project_id"])
    form = confirm_form(operator, run_id, "pause")
    if csrf is None:
        del form["csrf_token"]
    else:
        form["csrf_token"] = csrf

    response = submit(operator, run_id, "pause", form, "")

    assert response.status_code == 400
    assert "This form has expired or did not come from this console" in text(response)
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"
    assert operator_audit_rows(engine, run_id) == []


def test_another_sessions_csrf_token_is_refused(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"])
    login(client, project["project_id"], project["api_token"])
    form = confirm_form(client, run_id, "pause")
    other = create_app(settings, engine).test_client()
    login(other, project["project_id"], project["api_token"])

    response = submit(other, run_id, "pause", form, "")

    assert response.status_code == 400
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


def test_sign_in_itself_needs_the_csrf_token(client, project):
    client.get("/console/login")

    response = client.post(
        "/console/login", data={"project_id": project["project_id"], "token": project["api_token"]}
    )

    assert response.status_code == 400
    assert client.get("/console/runs").status_code == 303


def test_a_viewer_cannot_act(client, engine, settings, project, role_tokens, tmp_path):
    run_id = halted_run(engine, settings, project, tmp_path)
    login(client, project["project_id"], role_tokens["viewer"])
    form = hidden_fields(text(client.get(f"/console/runs/{run_id}")))

    confirm = client.get(f"/console/runs/{run_id}/retry-resolution")
    act = client.post(
        f"/console/runs/{run_id}/retry-resolution", data={**form, "operation_id": "v-1"}
    )

    assert (confirm.status_code, act.status_code) == (403, 403)
    assert "A viewer token can look but not act" in text(act)
    assert operator_audit_rows(engine, run_id) == []


def test_manual_close_is_for_admins_and_only_when_enabled(
    engine, settings, project, role_tokens, tmp_path, redis_client
):
    run_id = halted_run(engine, settings, project, tmp_path)
    enabled = dataclasses.replace(settings, manual_close_enabled=1)
    pages = {}
    for label, app_settings, role in [
        ("operator", enabled, "operator"),
        ("admin, disabled", settings, "admin"),
        ("admin, enabled", enabled, "admin"),
    ]:
        client = create_app(app_settings, engine).test_client()
        login(client, project["project_id"], role_tokens[role])
        pages[label] = (
            text(client.get(f"/console/runs/{run_id}")),
            client.get(f"/console/runs/{run_id}/manual-close").status_code,
        )

    button = f"/console/runs/{run_id}/manual-close?version="
    assert {label: (button in page, status) for label, (page, status) in pages.items()} == {
        "operator": (False, 403),
        "admin, disabled": (False, 409),
        "admin, enabled": (True, 200),
    }


def test_a_reason_over_the_limit_is_a_400_and_changes_nothing(operator, engine, project):
    run_id = test_runs.admit(engine, project["project_id"])
    form = confirm_form(operator, run_id, "pause")

    response = submit(operator, run_id, "pause", form, "x" * 1001)

    assert response.status_code == 400
    assert "The reason is too long" in text(response)
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"
