"""Client mistakes the HTTP API refuses with its documented code and nothing written: a bulk
rerun without a filter, a malformed or repeated Idempotency-Key, a weak entity-tag in
If-Match, a tool result for a step the run's workflow does not have."""

from __future__ import annotations

import json

import pytest

from awooop.engine import runner
from tests.support import db, tokens
from tests.support import runs as test_runs


def path(project, suffix: str) -> str:
    return f"/v1/projects/{project['project_id']}{suffix}"


@pytest.fixture
def admin(engine, project):
    return tokens.add(engine, project["project_id"], "admin")


# -- bulk rerun: at least one filter ---------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"dry_run": True},
        {"filters": {}, "dry_run": True},
        {"filters": None, "dry_run": True},
        {"filters": {}},
        {},
    ],
)
def test_a_bulk_rerun_without_a_filter_is_refused_and_writes_nothing(
    client, engine, project, settings, admin, body
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    counts = db.row_counts(engine)

    response = client.post(
        path(project, "/runs/rerun"),
        headers=tokens.operation(admin, **{"Idempotency-Key": "bulk-all"}),
        json=body,
    )

    assert response.status_code == 400, response.json
    assert response.json["error"]["code"] == "E-REQUEST-001"
    assert "at least one filter" in response.json["error"]["message"]
    assert db.row_counts(engine) == counts


# -- Idempotency-Key: visible ASCII, one header ---------------------------------------------


@pytest.mark.parametrize(
    "keys",
    [
        ["a b"],  # a space is not a visible character
        [" "],
        ["k4", "k5"],  # two headers: which one is the key?
        ["k4,k5"],  # what two headers arrive as
    ],
)
def test_an_idempotency_key_that_is_not_one_visible_ascii_token_is_refused(
    client, engine, project, keys
):
    counts = db.row_counts(engine)

    response = client.post(
        path(project, "/runs"),
        headers=[
            ("Authorization", f"Bearer {project['api_token']}"),
            ("Content-Type", "application/json"),
            *[("Idempotency-Key", key) for key in keys],
        ],
        data=json.dumps({"hello": "world"}),
    )

    assert response.status_code == 400, response.json
    assert response.json["error"]["code"] == "E-IDEMPOTENT-003"
    assert db.row_counts(engine) == counts


def test_an_idempotency_key_of_visible_ascii_is_taken(client, engine, project):
    key = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != ",")

    response = client.post(
        path(project, "/runs"),
        headers=tokens.operation(project["api_token"], **{"Idempotency-Key": key}),
        data=json.dumps({"hello": "world"}),
    )

    assert response.status_code == 202, response.json


# -- If-Match: a weak entity-tag never matches -----------------------------------------------


def test_a_weak_entity_tag_in_if_match_never_matches(client, engine, project, admin):
    run_id = test_runs.admit(engine, project["project_id"])
    before = db.run(engine, run_id)

    response = client.post(
        path(project, f"/runs/{run_id}/pause"),
        headers=tokens.operation(admin, **{"If-Match": f'W/"{before["version"]}"'}),
        data=json.dumps({"operation_id": "op-weak", "reason": "weak tag"}),
    )

    assert response.status_code == 412, response.json
    assert response.json["error"]["code"] == "E-OPERATION-002"
    assert "weak" in response.json["error"]["message"]
    assert db.run(engine, run_id) == before
    assert [e for e in db.events(engine, run_id) if e["trigger"] == "operator"] == []


# -- tool results: the step must be one of the run's workflow --------------------------------


def deliver(client, project, run_id, **body):
    body = {"event_id": "evt-1", "step": "diagnose", "status": "succeeded", **body}
    return client.post(
        path(project, f"/runs/{run_id}/tool-results"),
        headers=tokens.operation(project["api_token"]),
        data=json.dumps(body),
    )


def test_a_tool_result_for_a_step_the_workflow_does_not_have_is_refused_and_writes_nothing(
    client, engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL
    before, events = db.run(engine, run_id), db.events(engine, run_id)

    response = deliver(client, project, run_id, event_id="e1", step="nosuchstep")

    assert response.status_code == 422, response.json
    assert response.json["error"]["code"] == "E-TOOL-001"
    assert "nosuchstep" in response.json["error"]["message"]
    assert db.run(engine, run_id) == before
    assert db.events(engine, run_id) == events
    assert db.count(engine, "awooop_inbox") == 0
    # The event id is not used up: the right delivery under it is accepted.
    right = deliver(client, project, run_id, event_id="e1")
    assert (right.status_code, right.json) == (202, {"status": "accepted"})


def test_a_result_for_a_real_step_the_run_no_longer_waits_for_is_still_late(
    client, engine, project, settings
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tool")
    assert runner.execute(engine, settings, run_id) == runner.Outcome.WAITING_TOOL

    # "a" is a step of the workflow, but not the one the run waits on.
    response = deliver(client, project, run_id, event_id="e2", step="a")

    assert (response.status_code, response.json["status"]) == (200, "late")
