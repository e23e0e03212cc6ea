"""Admission over the real app and a real PostgreSQL: each channel's event key (project, channel,
provider event id) admits one run per event."""

from __future__ import annotations

import json
import threading
import time

from tests.integration.conftest import queued_messages, queued_run_ids
from tests.support import db, requests


def post(client, request):
    path, headers, body = request
    return client.post(path, headers=headers, data=body)


def test_new_telegram_update_creates_a_pending_run_and_sends_one_message(
    client, engine, project, redis_client
):
    response = post(client, requests.telegram(project, update_id=1))

    assert response.status_code == 202
    assert response.json["status"] == "PENDING"
    run = db.run(engine, response.json["run_id"])
    assert run["workflow_name"] == "demo-telegram"
    assert run["input"]["provider_event_id"] == "0:1"
    assert queued_messages(redis_client) == 1
    assert json.loads(redis_client.lindex("runs", 0))["headers"]["task"] == "awooop.runs.execute"
    assert queued_run_ids(redis_client) == [response.json["run_id"]]


def test_same_telegram_update_twice_creates_one_run(client, engine, project, redis_client):
    first = post(client, requests.telegram(project, update_id=7))
    second = post(client, requests.telegram(project, update_id=7))

    assert first.status_code == 202
    assert second.status_code == 200
    assert second.json == {
        "run_id": first.json["run_id"],
        "status": "PENDING",
        "code": "E-IDEMPOTENT-001",
    }
    assert db.count(engine, "awooop_run_state") == 1
    assert db.count(engine, "awooop_channel_event_dedupe") == 1
    assert queued_messages(redis_client) == 1


def test_telegram_update_ids_of_different_bots_are_different_events(client, engine, project):
    path, headers, body = requests.telegram(project, update_id=5)

    a = client.post(path + "?bot_id=111", headers=headers, data=body)
    b = client.post(path + "?bot_id=222", headers=headers, data=body)

    assert (a.status_code, b.status_code) == (202, 202)
    assert a.json["run_id"] != b.json["run_id"]


def test_alertmanager_retry_is_a_duplicate(client, engine, project):
    first = post(client, requests.alertmanager(project))
    retry = post(client, requests.alertmanager(project))

    assert first.status_code == 202
    assert retry.status_code == 200
    assert retry.json["run_id"] == first.json["run_id"]
    assert retry.json["code"] == "E-IDEMPOTENT-001"
    assert db.count(engine, "awooop_run_state") == 1


def test_alertmanager_resolved_notification_is_a_new_run(client, engine, project):
    firing = post(client, requests.alertmanager(project, requests.alertmanager_payload("firing")))
    resolved = post(
        client, requests.alertmanager(project, requests.alertmanager_payload("resolved"))
    )

    assert (firing.status_code, resolved.status_code) == (202, 202)
    assert firing.json["run_id"] != resolved.json["run_id"]
    assert db.count(engine, "awooop_run_state") == 2


def test_alertmanager_alert_order_does_not_change_the_event(client, engine, project):
    alerts = [requests.alert("a"), requests.alert("b")]
    first = post(
        client, requests.alertmanager(project, requests.alertmanager_payload(alerts=alerts))
    )
    reordered = post(
        client,
        requests.alertmanager(
            project, requests.alertmanager_payload(alerts=list(reversed(alerts)))
        ),
    )

    assert first.status_code == 202
    assert reordered.status_code == 200
    assert reordered.json["run_id"] == first.json["run_id"]


def test_line_request_with_several_events_creates_one_run_per_event(
    client, engine, project, redis_client
):
    events = [requests.line_event("e1"), requests.line_event("e2"), requests.line_event("e3")]

    response = post(client, requests.line(project, events))

    assert response.status_code == 202
    run_ids = [r["run_id"] for r in response.json["runs"]]
    assert len(set(run_ids)) == 3
    assert db.count(engine, "awooop_run_state") == 3
    assert queued_messages(redis_client) == 3


def test_line_redelivery_of_some_events_only_creates_the_new_ones(client, engine, project):
    post(client, requests.line(project, [requests.line_event("e1")]))

    response = post(
        client, requests.line(project, [requests.line_event("e1"), requests.line_event("e2")])
    )

    assert response.status_code == 202
    codes = [r.get("code") for r in response.json["runs"]]
    assert codes == ["E-IDEMPOTENT-001", None]
    assert db.count(engine, "awooop_run_state") == 2


def test_line_verification_request_without_events_creates_nothing(client, engine, project):
    response = post(client, requests.line(project, []))

    assert response.status_code == 200
    assert response.json["runs"] == []
    assert db.row_counts(engine) == dict.fromkeys(db.TABLES, 0)


def test_gitea_delivery_id_is_the_event_key(client, engine, project):
    first = post(client, requests.gitea(project, delivery="abc"))
    again = post(client, requests.gitea(project, delivery="abc"))
    other = post(client, requests.gitea(project, delivery="def"))

    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 202)
    assert again.json["run_id"] == first.json["run_id"]
    assert other.json["run_id"] != first.json["run_id"]


def test_api_key_reused_with_another_body_is_refused_and_creates_no_run(
    client, engine, project, redis_client
):
    first = post(client, requests.api(project, key="k", payload={"n": 1}))
    reused = post(client, requests.api(project, key="k", payload={"n": 2}))

    assert first.status_code == 202
    assert reused.status_code == 422
    assert reused.json["error"]["code"] == "E-IDEMPOTENT-002"
    assert db.count(engine, "awooop_run_state") == 1
    assert queued_messages(redis_client) == 1


def test_api_same_key_same_body_returns_the_existing_run(client, engine, project):
    first = post(client, requests.api(project, key="k", payload={"n": 1}))
    again = post(client, requests.api(project, key="k", payload={"n": 1}))

    assert again.status_code == 200
    assert again.json["run_id"] == first.json["run_id"]


def test_same_idempotency_key_in_two_projects_makes_two_runs(client, engine, project, settings):
    from awooop import cli

    other = cli.create_project(settings, "other-project")

    a = post(client, requests.api(project, key="shared"))
    b = post(client, requests.api(other, key="shared"))

    assert (a.status_code, b.status_code) == (202, 202)
    assert a.json["run_id"] != b.json["run_id"]


def test_event_without_a_route_is_acknowledged_without_a_run(client, engine, project, settings):
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text("UPDATE awooop_project SET routes = routes - 'telegram'"))

    response = post(client, requests.telegram(project))

    assert response.status_code == 200
    assert response.json["status"] == "ignored"
    assert db.row_counts(engine) == dict.fromkeys(db.TABLES, 0)


def test_admission_writes_the_first_history_row(client, engine, project):
    response = post(client, requests.api(project))

    [event] = db.events(engine, response.json["run_id"])
    assert (event["kind"], event["from_status"], event["to_status"], event["trigger"]) == (
        "transition",
        None,
        "PENDING",
        "event",
    )


def test_valid_traceparent_is_kept_on_the_run(client, engine, project):
    path, headers, body = requests.api(project)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    response = client.post(path, headers={**headers, "traceparent": traceparent}, data=body)

    assert db.run(engine, response.json["run_id"])["traceparent"] == traceparent


def test_get_run_returns_the_run_for_a_reader_token(client, project):
    created = post(client, requests.api(project))
    run_id = created.json["run_id"]

    response = client.get(
        f"/v1/projects/{project['project_id']}/runs/{run_id}",
        headers={"Authorization": f"Bearer {project['api_token']}"},
    )

    assert response.status_code == 200
    body = response.json
    assert (body["run_id"], body["status"], body["attempt_count"], body["saga_steps"]) == (
        run_id,
        "PENDING",
        0,
        [],
    )


def test_get_run_of_another_project_is_not_found(client, project, settings):
    from awooop import cli

    other = cli.create_project(settings, "other-project")
    created = post(client, requests.api(other))

    response = client.get(
        f"/v1/projects/{project['project_id']}/runs/{created.json['run_id']}",
        headers={"Authorization": f"Bearer {project['api_token']}"},
    )

    assert response.status_code == 404
    assert response.json["error"]["code"] == "E-NOT-FOUND-001"


def test_get_run_without_a_token_is_unauthenticated(client, project):
    response = client.get(f"/v1/projects/{project['project_id']}/runs/not-a-uuid")

    assert response.status_code == 401


def test_route_changes_reach_a_web_process_within_the_auth_cache_time(
    settings, engine, project, redis_client
):
    from sqlalchemy import text

    from awooop.web.app import create_app

    quick = settings.__class__(**{**settings.__dict__, "auth_cache_seconds": 0.5})
    client = create_app(quick, engine).test_client()
    assert post(client, requests.telegram(project, update_id=1)).status_code == 202
    with engine.begin() as conn:
        conn.execute(text("UPDATE awooop_project SET routes = routes - 'telegram'"))

    cached = post(client, requests.telegram(project, update_id=2))
    time.sleep(0.6)
    refreshed = post(client, requests.telegram(project, update_id=3))

    assert cached.status_code == 202
    assert (refreshed.status_code, refreshed.json["status"]) == (200, "ignored")


def test_the_answer_does_not_wait_for_the_broker_push(
    client, engine, project, redis_client, monkeypatch
):
    """The run is committed and answered 202 while its message waits in the web process's
    sender; the sender then pushes it."""
    from awooop.tasks import handoff, runs

    pushing = threading.Event()
    release = threading.Event()

    def held_enqueue(ids: list[str]) -> int:
        pushing.set()
        assert release.wait(timeout=10)
        return runs.enqueue(ids)

    monkeypatch.setattr(handoff, "_sender", handoff.Sender(held_enqueue))
    response = post(client, requests.telegram(project, update_id=11))

    assert response.status_code == 202
    assert db.run(engine, response.json["run_id"])["status"] == "PENDING"
    assert pushing.wait(timeout=10)
    assert redis_client.llen("runs") == 0  # answered while the push is held
    release.set()
    assert queued_messages(redis_client) == 1
    assert queued_run_ids(redis_client) == [response.json["run_id"]]


def test_the_app_asks_whether_a_hook_or_view_is_async_once_per_function(
    client, project, monkeypatch
):
    import flask.app

    asked: list[object] = []
    real = flask.app.iscoroutinefunction

    def counting(func):
        asked.append(func)
        return real(func)

    monkeypatch.setattr(flask.app, "iscoroutinefunction", counting)

    first = post(client, requests.telegram(project, update_id=31))
    after_first = len(asked)
    second = post(client, requests.telegram(project, update_id=32))

    assert (first.status_code, second.status_code) == (202, 202)
    assert after_first > 0  # the hooks and the view were asked about once...
    assert len(asked) == after_first  # ...and not again on the next request
    assert len(set(map(id, asked))) == len(asked)
