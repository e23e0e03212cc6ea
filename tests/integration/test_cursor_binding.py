"""A page cursor is taken only by the list that issued it: the same endpoint, project and
filters. Anything else is a 400 E-REQUEST-001, and whatever a cursor says, a list reads only
the caller's project."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from awooop import cli
from awooop.engine import runner
from tests.support import runs as test_runs
from tests.support import tokens


def url(project, suffix: str) -> str:
    return f"/v1/projects/{project['project_id']}{suffix}"


@pytest.fixture
def viewer(engine, project):
    return tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))


@pytest.fixture
def other(settings, engine):
    """Another project, with a viewer token and finished runs of its own."""
    made = cli.create_project(settings, f"o{uuid.uuid4().hex[:8]}")
    made["viewer"] = tokens.bearer(tokens.add(engine, made["project_id"], "viewer"))
    return made


def completed(engine, settings, project, count: int) -> list:
    run_ids = [test_runs.admit(engine, project["project_id"], "noop-3") for _ in range(count)]
    for run_id in run_ids:
        assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
    return run_ids


def first_cursor(client, project, headers, **query) -> str:
    response = client.get(url(project, "/runs"), headers=headers, query_string={**query})
    assert response.status_code == 200, response.json
    assert response.json["next_cursor"] is not None
    return response.json["next_cursor"]


def refused(response) -> bool:
    return (
        response.status_code == 400
        and response.json["error"]["code"] == "E-REQUEST-001"
        and "cursor" in response.json["error"]["message"]
    )


def test_a_runs_cursor_is_taken_with_the_same_filters_in_any_order(
    client, engine, project, settings, viewer
):
    completed(engine, settings, project, 3)
    query = {"status": "COMPLETED", "workflow": "noop-3", "limit": 1}
    cursor = first_cursor(client, project, viewer, **query)

    again = client.get(
        url(project, "/runs"),
        headers=viewer,
        # the same filters in another order, another limit
        query_string=[("limit", "2"), ("workflow", "noop-3"), ("status", "COMPLETED")]
        + [("cursor", cursor)],
    )

    assert again.status_code == 200, again.json
    assert len(again.json["runs"]) == 2


@pytest.mark.parametrize(
    "query",
    [
        {},  # no filter
        {"status": "FAILED"},  # another value
        {"status": "COMPLETED", "channel": "api"},  # one more filter
        {"workflow": "noop-3"},  # another filter
    ],
)
def test_a_runs_cursor_with_other_filters_is_refused(
    client, engine, project, settings, viewer, query
):
    completed(engine, settings, project, 2)
    cursor = first_cursor(client, project, viewer, status="COMPLETED", limit=1)

    response = client.get(
        url(project, "/runs"), headers=viewer, query_string={**query, "cursor": cursor}
    )

    assert refused(response), response.json


def test_a_cursor_of_another_project_is_refused(client, engine, project, settings, viewer, other):
    completed(engine, settings, project, 2)
    completed(engine, settings, other, 2)
    cursor = first_cursor(client, project, viewer, status="COMPLETED", limit=1)

    response = client.get(
        url(other, "/runs"),
        headers=other["viewer"],
        query_string={"status": "COMPLETED", "cursor": cursor},
    )

    assert refused(response), response.json


def test_a_cursor_of_another_list_is_refused(client, engine, project, settings, viewer):
    admin = tokens.operation(tokens.add(engine, project["project_id"], "admin"))
    run_ids = completed(engine, settings, project, 2)
    runs_cursor = first_cursor(client, project, viewer, workflow="noop-3", limit=1)
    events = client.get(
        url(project, f"/runs/{run_ids[0]}/events"), headers=viewer, query_string={"limit": 1}
    )
    events_cursor = events.json["next_cursor"]
    assert events_cursor is not None

    # the audit trail of another run
    other_run = client.get(
        url(project, f"/runs/{run_ids[1]}/events"),
        headers=viewer,
        query_string={"cursor": events_cursor},
    )
    # the intervention queue with a runs cursor
    queue = client.get(
        url(project, "/interventions"), headers=viewer, query_string={"cursor": runs_cursor}
    )
    # a bulk rerun with a runs list cursor of the same filters
    bulk = client.post(
        url(project, "/runs/rerun"),
        headers=admin,
        json={"filters": {"workflow": "noop-3"}, "dry_run": True, "cursor": runs_cursor},
    )

    assert refused(other_run), other_run.json
    assert refused(queue), queue.json
    assert refused(bulk), bulk.json
    same_run = client.get(
        url(project, f"/runs/{run_ids[0]}/events"),
        headers=viewer,
        query_string={"cursor": events_cursor},
    )
    assert same_run.status_code == 200, same_run.json


def test_a_bulk_rerun_cursor_goes_on_with_the_same_filters_only(client, engine, project, settings):
    completed(engine, settings, project, 3)
    admin = tokens.operation(tokens.add(engine, project["project_id"], "admin"))
    body = {"filters": {"workflow": "noop-3"}, "dry_run": True, "limit": 1}
    cursor = client.post(url(project, "/runs/rerun"), headers=admin, json=body).json["next_cursor"]

    same = client.post(url(project, "/runs/rerun"), headers=admin, json={**body, "cursor": cursor})
    other = client.post(
        url(project, "/runs/rerun"),
        headers=admin,
        json={**body, "filters": {"status": "COMPLETED"}, "cursor": cursor},
    )

    assert same.status_code == 200, same.json
    assert refused(other), other.json


def test_a_forged_cursor_never_reads_another_project_s_runs(
    client, engine, project, settings, viewer, other
):
    """Cursors are not signed: a client may forge one that passes the binding check (it is
    not a secret). It only says where a page starts; the rows are the caller's project's."""
    completed(engine, settings, other, 2)
    mine = completed(engine, settings, project, 2)
    issued = first_cursor(client, project, viewer, limit=1)
    data = json.loads(base64.urlsafe_b64decode(issued + "=" * (-len(issued) % 4)))
    data["t"] = "9999-01-01T00:00:00+00:00"  # start after everything
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    response = client.get(url(project, "/runs"), headers=viewer, query_string={"cursor": forged})

    assert response.status_code == 200, response.json
    assert {r["run_id"] for r in response.json["runs"]} == {str(r) for r in mine}


@pytest.mark.parametrize("run_id", ["not-a-run", "aca3a7ff-1ffa-4dbd-8eb1-0fcdbeef9b4"])
def test_a_malformed_cursor_is_refused_before_a_run_id_that_is_not_one(
    client, project, viewer, run_id
):
    """As for any list, a cursor the list could never have returned is a 400 first; the run
    id is looked at after it (404)."""
    bad = base64.urlsafe_b64encode(b'{"k":"events","s":-1}').decode().rstrip("=")
    path = url(project, f"/runs/{run_id}/events")

    refused_first = client.get(path, headers=viewer, query_string={"cursor": bad})
    without_cursor = client.get(path, headers=viewer)

    assert refused(refused_first), refused_first.json
    assert without_cursor.status_code == 404
