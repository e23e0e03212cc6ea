"""Client mistakes the HTTP API refuses with its documented code and nothing written."""

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
