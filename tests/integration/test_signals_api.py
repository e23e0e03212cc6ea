"""Signals over the real app: ``POST …/runs/{run_id}/signals/{name}``, and Alertmanager
notifications correlated to the open run of their alert group."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from sqlalchemy import text

from awooop.engine import runner
from awooop.store import projects
from tests.integration.conftest import queued_messages
from tests.support import db, requests
from tests.support import runs as test_runs


def signal(client, project, run_id, name="resolved", key="sig-1", body=None, **headers):
    return client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/signals/{name}",
        headers={
            "Authorization": f"Bearer {project['api_token']}",
            "Content-Type": "application/json",
            **({"Idempotency-Key": key} if key else {}),
            **headers,
        },
        data=json.dumps(body if body is not None else {"by": "ops"}),
    )


def test_a_signal_to_a_waiting_run_is_delivered_and_its_message_sent(
    client, engine, project, settings, redis_client
):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING

    response = signal(client, project, run_id, body={"note": "fixed"})

    assert response.status_code == 202
    assert response.json == {
        "run_id": str(run_id),
        "signal": "resolved",
        "signal_id": "sig-1",
        "status": "delivered",
    }
    assert queued_messages(redis_client) == 1
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    assert db.run(engine, run_id)["output"]["saw"]["payload"] == {"note": "fixed"}


def test_a_signal_sent_again_is_answered_as_a_duplicate(client, engine, project):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")

    first = signal(client, project, run_id)
    again = signal(client, project, run_id)
    reused = signal(client, project, run_id, body={"other": True})

    assert (first.status_code, first.json["status"]) == (202, "kept")
    assert (again.status_code, again.json["code"]) == (200, "E-IDEMPOTENT-001")
    assert (reused.status_code, reused.json["error"]["code"]) == (422, "E-IDEMPOTENT-002")
    assert db.count(engine, "awooop_signal") == 1


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"name": "not ok!"}, 400, "E-REQUEST-001"),
        ({"key": None}, 400, "E-IDEMPOTENT-003"),
        ({"body": ["not", "an", "object"]}, 400, "E-REQUEST-001"),
        ({"run_id": "nope"}, 404, "E-NOT-FOUND-001"),
        ({"run_id": str(uuid.UUID(int=1))}, 404, "E-NOT-FOUND-001"),
        ({"Content-Type": "text/plain"}, 415, "E-REQUEST-003"),
        ({"Authorization": "Bearer wrong"}, 401, "E-AUTH-001"),
    ],
)
def test_a_bad_signal_gets_its_error_and_keeps_nothing(
    client, engine, project, change, status, code
):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    args = {"name": "resolved", "key": "k", "body": None, "run_id": run_id}
    headers = {k: v for k, v in change.items() if k not in args}
    args.update({k: v for k, v in change.items() if k in args})

    response = signal(client, project, args.pop("run_id"), **args, **headers)

    assert (response.status_code, response.json["error"]["code"]) == (status, code)
    assert db.count(engine, "awooop_signal") == 0


def test_a_finished_run_refuses_a_signal(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-signal-wait")
    signal(client, project, run_id, key="first")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED

    response = signal(client, project, run_id, key="second")

    assert (response.status_code, response.json["error"]["code"]) == (409, "E-SIGNAL-001")


# --- Correlated Alertmanager notifications ---------------------------------------------------


@pytest.fixture
def watched(engine, project) -> dict:
    with engine.begin() as conn:
        projects.set_routes(conn, project["project_id"], {"alertmanager": "test-alert-watch"})
    return project


def notify(client, project, status):
    path, headers, body = requests.alertmanager(project, requests.alertmanager_payload(status))
    return client.post(path, headers=headers, data=body)


def test_a_resolved_notification_goes_to_the_open_run_of_its_group(
    client, engine, watched, settings, redis_client
):
    firing = notify(client, watched, "firing")
    run_id = firing.json["run_id"]
    assert runner.execute(engine, settings, uuid.UUID(run_id)) == runner.Outcome.WAITING

    resolved = notify(client, watched, "resolved")
    retried = notify(client, watched, "resolved")

    assert (resolved.status_code, resolved.json) == (
        202,
        {"run_id": run_id, "status": "PENDING", "signal": "resolved"},
    )
    assert (retried.status_code, retried.json["code"]) == (200, "E-IDEMPOTENT-001")
    assert retried.json["run_id"] == run_id
    assert db.count(engine, "awooop_run_state") == 1
    assert db.count(engine, "awooop_signal") == 1
    assert queued_messages(redis_client) == 2  # the run's first message, and its wake-up
    assert runner.execute(engine, settings, uuid.UUID(run_id)) == runner.Outcome.COMPLETED
    saw = db.run(engine, run_id)["output"]["saw"]
    assert saw["payload"]["event"]["status"] == "resolved"


def test_a_notification_after_its_run_finished_starts_a_new_run(client, engine, watched, settings):
    firing = notify(client, watched, "firing")
    first = uuid.UUID(firing.json["run_id"])
    assert notify(client, watched, "resolved").json["signal"] == "resolved"
    assert runner.execute(engine, settings, first) == runner.Outcome.COMPLETED

    again = requests.alertmanager_payload("firing")
    again["alerts"][0]["startsAt"] = "2026-11-30T10:00:00Z"  # the alert fired anew
    path, headers, body = requests.alertmanager(watched, again)
    response = client.post(path, headers=headers, data=body)

    assert response.status_code == 202
    assert "signal" not in response.json and response.json["run_id"] != str(first)
    assert db.run(engine, response.json["run_id"])["correlation_key"] == again["groupKey"]


def test_two_first_events_of_one_group_start_one_run(engine, watched, settings):
    # Given two different notifications of one alert group, neither with a run yet, both
    # held at the group's admission lock
    from awooop import db as awooop_db
    from awooop.channels import alertmanager
    from awooop.store import admission
    from awooop.workflows import registry
    from tests.support import waiting

    workflow = registry.latest("test-alert-watch")
    events = []
    for starts_at in ("2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z"):
        payload = requests.alertmanager_payload("firing")
        payload["alerts"][0]["startsAt"] = starts_at
        new = test_runs.new_run(watched["project_id"], workflow, payload, "alertmanager")
        events.append((new, alertmanager.by_group(new.input)))
    key = events[0][1].key
    results: list = []

    def admit(new, correlation):
        with awooop_db.transaction(engine) as conn:
            results.append(admission.admit(conn, new, None, correlation))

    with awooop_db.transaction(engine) as holder:
        holder.execute(
            text("SELECT pg_advisory_xact_lock(:ns, hashtext(:p || '/' || :w || '/' || :k))"),
            {
                "ns": admission.CORRELATION_LOCK_NAMESPACE,
                "p": watched["project_id"],
                "w": workflow.name,
                "k": key,
            },
        )
        threads = [threading.Thread(target=admit, args=event) for event in events]
        for t in threads:
            t.start()
        waiting.until(
            lambda: (
                db.rows(
                    engine,
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event = 'advisory'"
                    " AND query LIKE '%pg_advisory_xact_lock%' AND pid <> pg_backend_pid()",
                )[0]["n"]
                == 2
            ),
            what="both admissions waiting for the group's lock",
        )
    # When the lock is let go
    for t in threads:
        t.join(timeout=20)

    # Then one event started the run and the other went to it as a signal
    assert sorted((r.created, r.signalled) for r in results) == [
        (False, "firing"),
        (True, None),
    ]
    assert len({r.run_id for r in results}) == 1
    assert db.count(engine, "awooop_run_state") == 1
    assert db.count(engine, "awooop_signal") == 1
    assert db.count(engine, "awooop_channel_event_dedupe") == 2
