"""Starting a named workflow over ``POST /v1/projects/{p}/runs`` (a body with a ``workflow``
key): the project's allow-list, versions, idempotency and strict parsing, over the real app
and a real PostgreSQL."""

from __future__ import annotations

import dataclasses

import pytest

from awooop.store import projects
from awooop.web.app import create_app
from tests.integration.conftest import queued_messages
from tests.support import db, requests


def start(client, project, body, key: str = "start-1"):
    path, headers, raw = requests.api(project, key, body)
    return client.post(path, headers=headers, data=raw)


def allow(engine, project, *names: str) -> None:
    with engine.connect() as conn:
        projects.set_allowed_workflows(conn, project["project_id"], list(names), [])


def test_a_routed_workflow_starts_with_the_given_input_as_its_event(
    client, engine, project, redis_client
):
    response = start(client, project, {"workflow": "demo-telegram", "input": {"host": "db-1"}})

    assert response.status_code == 202, response.json
    assert response.json["status"] == "PENDING"
    run = db.run(engine, response.json["run_id"])
    assert (run["workflow_name"], run["workflow_version"], run["channel_type"]) == (
        "demo-telegram",
        1,
        "api",
    )
    assert run["input"]["event"] == {"host": "db-1"}
    assert run["input"]["meta"] == {"workflow": "demo-telegram"}
    assert run["input"]["provider_event_id"] == "start-1"
    assert queued_messages(redis_client) == 1


def test_an_allowed_workflow_starts_at_its_latest_version_with_an_empty_input(
    client, engine, project
):
    allow(engine, project, "alert-triage")

    response = start(client, project, {"workflow": "alert-triage"})

    assert response.status_code == 202, response.json
    run = db.run(engine, response.json["run_id"])
    assert (run["workflow_name"], run["workflow_version"]) == ("alert-triage", 2)
    assert run["input"]["event"] == {}


def test_a_requested_version_is_the_one_that_runs(client, engine, project):
    allow(engine, project, "alert-triage")

    response = start(client, project, {"workflow": "alert-triage", "version": 1, "input": {}})

    assert response.status_code == 202, response.json
    run = db.run(engine, response.json["run_id"])
    assert run["workflow_version"] == 1
    assert run["input"]["meta"] == {"workflow": "alert-triage", "version": 1}


def test_a_workflow_neither_routed_nor_allowed_is_refused_and_nothing_is_written(
    client, engine, project
):
    allow(engine, project, "alert-triage")

    response = start(client, project, {"workflow": "chatops"})

    assert response.status_code == 422
    assert response.json["error"]["code"] == "E-WORKFLOW-001"
    assert db.row_counts(engine)["awooop_run_state"] == 0
    assert db.count(engine, "awooop_channel_event_dedupe") == 0


def test_a_workflow_allowed_right_after_a_refusal_starts_at_once(settings, engine, project):
    # Given a web that keeps a project's settings for five minutes, and a start it refused
    # because the workflow is not allowed (the refusal read the settings it now keeps)
    app = create_app(dataclasses.replace(settings, auth_cache_seconds=300), engine)
    client = app.test_client()
    refused = start(client, project, {"workflow": "alert-triage"}, key="before")
    assert refused.status_code == 422

    # When an operator allows the workflow and the start is sent again at once
    allow(engine, project, "alert-triage")
    response = start(client, project, {"workflow": "alert-triage"}, key="after")

    # Then it starts: a refusal is checked against the database, not the kept settings
    assert response.status_code == 202, response.json
    assert db.run(engine, response.json["run_id"])["workflow_name"] == "alert-triage"
    # And the refusal left nothing behind
    assert db.count(engine, "awooop_channel_event_dedupe") == 1


def test_an_unknown_workflow_answers_exactly_like_one_not_allowed(client, engine, project):
    registered = start(client, project, {"workflow": "chatops"}, key="a")
    unknown = start(client, project, {"workflow": "no-such-workflow"}, key="b")

    assert (registered.status_code, unknown.status_code) == (422, 422)
    assert registered.json == unknown.json


def test_an_unregistered_version_is_refused_with_its_own_code(client, engine, project):
    allow(engine, project, "alert-triage")

    response = start(client, project, {"workflow": "alert-triage", "version": 9})

    assert response.status_code == 422
    assert response.json["error"]["code"] == "E-WORKFLOW-002"
    assert "the latest is 2" in response.json["error"]["message"]
    assert db.count(engine, "awooop_run_state") == 0


def test_the_same_start_request_twice_returns_the_same_run(client, engine, project):
    body = {"workflow": "demo-api", "input": {"n": 1}}

    first = start(client, project, body)
    again = start(client, project, body)

    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json == {
        "run_id": first.json["run_id"],
        "status": "PENDING",
        "code": "E-IDEMPOTENT-001",
    }
    assert db.count(engine, "awooop_run_state") == 1


@pytest.mark.parametrize(
    "other",
    [
        {"workflow": "demo-api", "input": {"n": 2}},
        {"workflow": "demo-telegram", "input": {"n": 1}},
        {"workflow": "demo-api", "version": 1, "input": {"n": 1}},
        {"n": 1},
    ],
    ids=["other-input", "other-workflow", "version-added", "plain-event"],
)
def test_the_same_key_with_another_body_is_refused(client, engine, project, other):
    first = start(client, project, {"workflow": "demo-api", "input": {"n": 1}})

    reused = start(client, project, other)

    assert first.status_code == 202
    assert reused.status_code == 422
    assert reused.json["error"]["code"] == "E-IDEMPOTENT-002"
    assert db.count(engine, "awooop_run_state") == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"workflow": "demo-api", "inputs": {}}, "unknown keys in a start request: inputs"),
        ({"workflow": 7}, "workflow must be a name"),
        ({"workflow": ""}, "workflow must be a name"),
        ({"workflow": "x" * 129}, "workflow must be a name"),
        ({"workflow": None}, "workflow must be a name"),
        ({"workflow": "demo-api", "version": "1"}, "version must be a positive integer"),
        ({"workflow": "demo-api", "version": 0}, "version must be a positive integer"),
        ({"workflow": "demo-api", "version": True}, "version must be a positive integer"),
        ({"workflow": "demo-api", "version": 1.5}, "version must be a positive integer"),
        ({"workflow": "demo-api", "input": [1]}, "input must be a JSON object"),
        ({"workflow": "demo-api", "input": None}, "input must be a JSON object"),
    ],
)
def test_a_malformed_start_request_is_a_400_and_writes_nothing(
    client, engine, project, redis_client, body, message
):
    response = start(client, project, body)

    assert response.status_code == 400
    assert response.json["error"]["code"] == "E-REQUEST-001"
    assert message in response.json["error"]["message"]
    assert db.count(engine, "awooop_run_state") == 0
    assert db.count(engine, "awooop_channel_event_dedupe") == 0
    assert queued_messages(redis_client) == 0


def test_a_body_without_a_workflow_key_is_still_an_event_for_the_routed_workflow(
    client, engine, project
):
    response = start(client, project, {"summary": "disk almost full", "input": 3})

    assert response.status_code == 202, response.json
    run = db.run(engine, response.json["run_id"])
    assert run["workflow_name"] == "demo-api"
    assert run["input"]["event"] == {"summary": "disk almost full", "input": 3}
    assert run["input"]["meta"] == {}
