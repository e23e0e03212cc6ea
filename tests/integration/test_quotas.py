"""Per-project quotas and rate limits, against a real PostgreSQL and Redis.

Active-run quota: enforced by the admission statement itself (one advisory lock per project,
then a count in a snapshot taken after it), so a concurrent burst cannot overshoot it.
"""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

from awooop import cli
from awooop.config import Settings
from awooop.engine import runner
from awooop.web.app import create_app
from tests.integration.conftest import queued_messages
from tests.support import db, requests, tokens
from tests.support import runs as test_runs


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Limit changes apply to the next request (no cached project limits)."""
    return dataclasses.replace(settings, auth_cache_seconds=0)


def admit_concurrently(app, requests_to_send):
    """POST every (path, headers, body) at once, each from its own thread and client."""
    start = threading.Barrier(len(requests_to_send))
    answers: list = [None] * len(requests_to_send)

    def send(i: int) -> None:
        path, headers, raw = requests_to_send[i]
        client = app.test_client()
        start.wait()
        answers[i] = client.post(path, headers=headers, data=raw)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests_to_send))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return answers


def test_a_concurrent_burst_over_the_quota_admits_exactly_the_quota_and_writes_nothing_else(
    client, engine, project, settings, redis_client
):
    tokens.set_limits(engine, project["project_id"], max_active_runs=5)
    other = cli.create_project(settings, "unlimited")

    answers = admit_concurrently(
        client.application, [requests.api(project, key=f"burst-{i}") for i in range(20)]
    )

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [202] * 5 + [429] * 15
    refused = [a for a in answers if a.status_code == 429]
    assert {a.json["error"]["code"] for a in refused} == {"E-QUOTA-001"}
    assert {a.headers["Retry-After"] for a in refused} == {str(settings.quota_retry_after_seconds)}
    assert db.count(engine, "awooop_run_state") == 5
    assert db.count(engine, "awooop_channel_event_dedupe") == 5
    assert db.count(engine, "awooop_run_event") == 5
    assert queued_messages(redis_client) == 5
    # Another project is not held back by this one being full.
    path, headers, raw = requests.api(other, key="burst-0")
    assert client.post(path, headers=headers, data=raw).status_code == 202


def test_a_duplicate_is_still_answered_when_the_project_is_over_quota(client, engine, project):
    path, headers, raw = requests.api(project, key="first")
    created = client.post(path, headers=headers, data=raw)
    tokens.set_limits(engine, project["project_id"], max_active_runs=1)

    again = client.post(path, headers=headers, data=raw)
    new_path, new_headers, new_raw = requests.api(project, key="second")
    refused = client.post(new_path, headers=new_headers, data=new_raw)

    assert created.status_code == 202
    assert again.status_code == 200
    assert again.json["run_id"] == created.json["run_id"]
    assert again.json["code"] == "E-IDEMPOTENT-001"
    assert refused.status_code == 429
    assert db.count(engine, "awooop_run_state") == 1


def test_finished_runs_free_their_place_in_the_quota(client, engine, project, settings):
    tokens.set_limits(engine, project["project_id"], max_active_runs=1)
    path, headers, raw = requests.api(project, key="one")
    first = client.post(path, headers=headers, data=raw)
    path2, headers2, raw2 = requests.api(project, key="two")
    assert client.post(path2, headers=headers2, data=raw2).status_code == 429

    runner.execute(engine, settings, first.json["run_id"])

    assert client.post(path2, headers=headers2, data=raw2).status_code == 202


def test_paused_and_waiting_runs_count_as_active(client, engine, project, settings):
    run_id = test_runs.admit(engine, project["project_id"], "test-halt")
    runner.execute(engine, settings, run_id)  # WAITING_APPROVAL / MANUAL_INTERVENTION
    tokens.set_limits(engine, project["project_id"], max_active_runs=1)

    path, headers, raw = requests.api(project, key="more")

    assert client.post(path, headers=headers, data=raw).status_code == 429


def test_a_multi_event_line_request_over_quota_is_refused_whole(client, engine, project):
    tokens.set_limits(engine, project["project_id"], max_active_runs=1)
    path, headers, raw = requests.line(
        project, [requests.line_event("e1"), requests.line_event("e2")]
    )

    response = client.post(path, headers=headers, data=raw)

    assert response.status_code == 429
    assert db.row_counts(engine) == dict.fromkeys(db.TABLES, 0)


def test_a_quota_of_zero_admits_nothing_on_any_channel(client, engine, project):
    tokens.set_limits(engine, project["project_id"], max_active_runs=0)

    answers = [
        client.post(path, headers=headers, data=raw)
        for path, headers, raw in (requests.valid(c, project) for c in requests.CREDENTIAL_HEADERS)
    ]

    assert [a.status_code for a in answers] == [429] * 5
    assert db.row_counts(engine) == dict.fromkeys(db.TABLES, 0)


def test_ingress_over_its_rate_limit_is_429_with_retry_after_and_writes_nothing(
    client, engine, project, settings, redis_client
):
    tokens.set_limits(engine, project["project_id"], ingress_per_minute=3)
    other = cli.create_project(settings, "neighbour")

    answers = [
        client.post(path, headers=headers, data=raw)
        for path, headers, raw in (requests.api(project, key=f"k{i}") for i in range(5))
    ]

    assert [a.status_code for a in answers] == [202, 202, 202, 429, 429]
    assert answers[3].json["error"]["code"] == "E-RATE-001"
    assert 1 <= int(answers[3].headers["Retry-After"]) <= 60
    assert db.count(engine, "awooop_run_state") == 3
    path, headers, raw = requests.api(other, key="k0")
    assert client.post(path, headers=headers, data=raw).status_code == 202


def test_management_over_its_rate_limit_is_429(client, engine, project):
    tokens.set_limits(engine, project["project_id"], management_per_minute=2)
    operator = tokens.add(engine, project["project_id"], "operator")
    run_ids = test_runs.admit_many(engine, project["project_id"], 3)

    answers = [
        client.post(
            f"/v1/projects/{project['project_id']}/runs/{run_id}/pause",
            headers=tokens.operation(operator),
            data=json.dumps({"operation_id": f"op-{run_id}"}),
        )
        for run_id in run_ids
    ]

    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json["error"]["code"] == "E-RATE-001"
    assert "Retry-After" in answers[2].headers
    assert db.run(engine, run_ids[2])["control_state"] == "ACTIVE"


def test_rate_limits_fail_open_when_redis_is_down(engine, project, settings, redis_client):
    unreachable = dataclasses.replace(settings, rate_limit_redis_url="redis://127.0.0.1:9/0")
    client = create_app(unreachable, engine).test_client()
    tokens.set_limits(engine, project["project_id"], ingress_per_minute=1)

    answers = [
        client.post(path, headers=headers, data=raw)
        for path, headers, raw in (requests.api(project, key=f"k{i}") for i in range(3))
    ]

    assert [a.status_code for a in answers] == [202, 202, 202]


def test_removing_the_quota_admits_again(client, engine, project):
    path, headers, raw = requests.api(project, key="a")
    assert client.post(path, headers=headers, data=raw).status_code == 202

    tokens.set_limits(engine, project["project_id"], max_active_runs=1)
    path, headers, raw = requests.api(project, key="b")
    refused = client.post(path, headers=headers, data=raw)
    tokens.set_limits(engine, project["project_id"], max_active_runs=None)
    accepted = client.post(path, headers=headers, data=raw)

    assert (refused.status_code, accepted.status_code) == (429, 202)
