"""``GET /v1/projects/{p}/workers`` over HTTP, against a real PostgreSQL: every worker the
system knows, with the runs of the caller's project only."""

from __future__ import annotations

import uuid

import pytest

from awooop import cli
from awooop.store import leases, workers
from tests.support import runs as test_runs
from tests.support import tokens

LEASE = 300.0  # these leases never expire during a test


def held_by(engine, worker: str, project_id: str) -> uuid.UUID:
    """A RUNNING run of ``project_id`` claimed by ``worker`` (which beats once)."""
    run_id = test_runs.admit(engine, project_id)
    with engine.connect() as conn:
        workers.beat(conn, worker, host="host-a", pid=4242)
        assert leases.claim(conn, worker, LEASE, run_id) is not None
    return run_id


def listed(client, project, headers) -> dict[str, dict]:
    response = client.get(f"/v1/projects/{project['project_id']}/workers", headers=headers)
    assert response.status_code == 200, response.json
    return {w["worker_id"]: w for w in response.json["workers"]}


def test_workers_are_listed_with_the_runs_of_the_callers_project_only(
    client, engine, settings, project
):
    # Given a worker holding a run of this project and two of another, and an idle worker
    other = cli.create_project(settings, f"p{uuid.uuid4().hex[:8]}")
    held_by(engine, "busy-worker", project["project_id"])
    held_by(engine, "busy-worker", other["project_id"])
    held_by(engine, "busy-worker", other["project_id"])
    with engine.connect() as conn:
        workers.beat(conn, "idle-worker", host="host-b", pid=7)
    viewer = tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))

    # When a viewer of this project lists the workers
    found = listed(client, project, viewer)

    # Then both are shown, and only this project's run is counted
    busy, idle = found["busy-worker"], found["idle-worker"]
    assert (busy["host"], busy["pid"], busy["runs_held"]) == ("host-a", 4242, 1)
    assert (idle["host"], idle["pid"], idle["runs_held"]) == ("host-b", 7, 0)
    assert 0 <= busy["seen_seconds_ago"] < 60 and busy["judged_dead_at"] is None
    assert set(busy) == {
        "worker_id", "host", "pid", "started_at", "seen_at", "seen_seconds_ago",
        "judged_dead_at", "runs_held",
    }  # fmt: skip
    # And the other project's viewer sees its own two
    other_viewer = tokens.bearer(tokens.add(engine, other["project_id"], "viewer"))
    assert listed(client, other, other_viewer)["busy-worker"]["runs_held"] == 2


@pytest.mark.parametrize(("role", "status"), [("ingest", 403), (None, 401)])
def test_workers_need_a_reading_role(client, engine, project, role, status):
    headers = tokens.bearer(tokens.add(engine, project["project_id"], role)) if role else {}

    response = client.get(f"/v1/projects/{project['project_id']}/workers", headers=headers)

    assert response.status_code == status


def test_workers_take_no_query_parameters(client, engine, project):
    viewer = tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))

    response = client.get(f"/v1/projects/{project['project_id']}/workers?limit=5", headers=viewer)

    assert (response.status_code, response.json["error"]["code"]) == (400, "E-REQUEST-001")
