"""The runs API over HTTP: lists, filters, keyset pages, the audit trail, the intervention
queue and the run detail, against a real PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from awooop.engine import runner
from tests.support import db, tokens
from tests.support import runs as test_runs


@pytest.fixture
def viewer(engine, project):
    return tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))


def url(project, suffix: str = "") -> str:
    return f"/v1/projects/{project['project_id']}{suffix}"


def all_pages(client, path, headers, key="runs", **query):
    """Every item of a paged list, and how many pages it took."""
    items, pages, cursor = [], 0, None
    while True:
        args = {**query, **({"cursor": cursor} if cursor else {})}
        response = client.get(path, headers=headers, query_string=args)
        assert response.status_code == 200, response.json
        items += response.json[key]
        pages += 1
        cursor = response.json["next_cursor"]
        if cursor is None:
            return items, pages


def test_list_pages_cover_every_run_once_newest_first(client, engine, project, viewer):
    run_ids = test_runs.admit_many(engine, project["project_id"], 7)

    listed, pages = all_pages(client, url(project, "/runs"), viewer, limit=3)

    assert [r["run_id"] for r in listed] == [str(r) for r in reversed(run_ids)]
    assert pages == 3


def test_pages_have_no_duplicates_or_gaps_when_runs_share_a_created_at_or_arrive_meanwhile(
    client, engine, project, viewer
):
    run_ids = test_runs.admit_many(engine, project["project_id"], 9)
    with engine.connect() as conn:  # ties on created_at: the run_id breaks them
        conn.execute(
            text("UPDATE awooop_run_state SET created_at = '2026-11-29T10:00:00Z'"),
        )

    first = client.get(url(project, "/runs"), headers=viewer, query_string={"limit": 4}).json
    newer = test_runs.admit_many(engine, project["project_id"], 3)  # arrive between pages
    rest, _ = all_pages(client, url(project, "/runs"), viewer, limit=4, cursor=first["next_cursor"])

    seen = [r["run_id"] for r in first["runs"] + rest]
    assert len(seen) == len(set(seen)) == 9
    assert set(seen) == {str(r) for r in run_ids}
    assert not {str(r) for r in newer} & set(seen)  # newer than the first page: not in it


def test_list_filters_by_status_saga_status_workflow_channel_and_time(
    client, engine, project, settings, viewer
):
    pid = project["project_id"]
    pending = test_runs.admit(engine, pid, "noop-3")
    done = test_runs.admit(engine, pid, "noop-3", channel="telegram")
    runner.execute(engine, settings, done)
    halted = test_runs.admit(engine, pid, "test-halt")
    runner.execute(engine, settings, halted)

    def listed(**query):
        response = client.get(url(project, "/runs"), headers=viewer, query_string=query)
        assert response.status_code == 200, response.json
        return {r["run_id"] for r in response.json["runs"]}

    assert listed(status="PENDING") == {str(pending)}
    assert listed(status="PENDING,COMPLETED") == {str(pending), str(done)}
    assert listed(saga_status="MANUAL_INTERVENTION") == {str(halted)}
    assert listed(workflow="test-halt") == {str(halted)}
    assert listed(channel="telegram") == {str(done)}
    assert listed(workflow="no-such-workflow") == set()
    created = db.run(engine, done)["created_at"]
    assert listed(created_from=created.isoformat()) == {str(done), str(halted)}
    assert listed(created_until=created.isoformat()) == {str(pending)}
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert listed(created_from=future) == set()
    finished = db.run(engine, done)["finished_at"]
    assert listed(finished_from=finished.isoformat()) == {str(done)}
    assert listed(finished_until=finished.isoformat()) == set()
    assert listed(status="WAITING_APPROVAL", failure_code="E-SAGA-001") == {str(halted)}
    assert listed(failure_code="E-STEP-001") == set()


def test_list_filters_by_unsent_outbox_messages(client, engine, project, viewer):
    from tests.support import overview as seed

    pid = project["project_id"]
    (waiting, _), (parked, _), (sent, _) = seed.runs(engine, pid, "COMPLETED", 3, finished_ago=1)
    seed.outbox(engine, pid, waiting, "PENDING")
    seed.outbox(engine, pid, parked, "PARKED")
    seed.outbox(engine, pid, sent, "SENT")

    def listed(**query):
        response = client.get(url(project, "/runs"), headers=viewer, query_string=query)
        assert response.status_code == 200, response.json
        return {r["run_id"] for r in response.json["runs"]}

    assert listed(outbox="PENDING") == {str(waiting)}
    assert listed(outbox="PARKED") == {str(parked)}
    assert listed() == {str(waiting), str(parked), str(sent)}


def test_list_shows_summaries_without_input_or_journal(client, engine, project, viewer):
    test_runs.admit(engine, project["project_id"], event={"secret-ish": "payload"})

    run = client.get(url(project, "/runs"), headers=viewer).json["runs"][0]

    assert run["status"] == "PENDING" and run["saga_status"] == "RUNNING"
    assert run["workflow_name"] == "noop-3" and run["version"] == 0
    assert "input" not in run and "saga_steps" not in run


@pytest.mark.parametrize(
    "query",
    [
        {"status": "DONE"},
        {"status": "PENDING,nope"},
        {"status": ""},
        {"saga_status": "RUNNING,OOPS"},
        {"channel": "smtp"},
        {"limit": "0"},
        {"limit": "201"},
        {"limit": "ten"},
        {"limit": "-1"},
        {"created_from": "yesterday"},
        {"created_from": "2026-11-29T10:00:00"},  # no UTC offset: ambiguous
        {"finished_until": "2026-11-29T10:00:00"},
        {"failure_code": "E" * 65},
        {"outbox": "SENT"},
        {"cursor": "not-a-cursor"},
        {"cursor": "eyJrIjoicnVucyJ9"},  # a cursor without a position
        {"cursor": "eyJrIjoiZXZlbnRzIiwicyI6MX0"},  # an audit-trail cursor
        {"sort": "created_at"},
    ],
)
def test_bad_list_parameters_are_400(client, engine, project, viewer, query):
    response = client.get(url(project, "/runs"), headers=viewer, query_string=query)

    assert response.status_code == 400, response.json
    assert response.json["error"]["code"] == "E-REQUEST-001"


def test_run_detail_has_the_step_journal_and_its_version_as_etag(
    client, engine, project, settings, viewer
):
    run_id = test_runs.admit(engine, project["project_id"])
    runner.execute(engine, settings, run_id)

    response = client.get(url(project, f"/runs/{run_id}"), headers=viewer)

    assert response.status_code == 200
    run = response.json
    assert run["status"] == "COMPLETED"
    assert [(e["step"], e["status"]) for e in run["saga_steps"]] == [
        ("one", "SUCCEEDED"),
        ("two", "SUCCEEDED"),
        ("three", "SUCCEEDED"),
    ]
    assert response.headers["ETag"] == f'"{run["version"]}"'


def test_audit_trail_pages_by_seq_in_order_without_gaps(client, engine, project, settings, viewer):
    run_id = test_runs.admit(engine, project["project_id"])
    runner.execute(engine, settings, run_id)
    expected = [e["seq"] for e in db.events(engine, run_id)]
    assert len(expected) >= 3

    events, pages = all_pages(
        client, url(project, f"/runs/{run_id}/events"), viewer, key="events", limit=2
    )

    assert [e["seq"] for e in events] == expected
    assert pages == -(-len(expected) // 2)  # full pages, then no empty last page
    assert events[0]["kind"] == "transition" and events[0]["to_status"] == "PENDING"
    assert events[-1]["to_status"] == "COMPLETED"


def test_audit_trail_of_an_unknown_run_is_404(client, project, viewer):
    for run_id in (uuid.uuid4(), "not-a-uuid"):
        response = client.get(url(project, f"/runs/{run_id}/events"), headers=viewer)
        assert response.status_code == 404
        assert response.json["error"]["code"] == "E-NOT-FOUND-001"


def test_intervention_queue_lists_only_escalated_runs_oldest_first(
    client, engine, project, settings, viewer
):
    pid = project["project_id"]
    escalated = []
    for workflow in ("test-halt", "test-no-resolver", "test-halt"):
        run_id = test_runs.admit(engine, pid, workflow)
        runner.execute(engine, settings, run_id)
        escalated.append(run_id)
    test_runs.admit(engine, pid)  # pending: not in the queue
    done = test_runs.admit(engine, pid)
    runner.execute(engine, settings, done)

    queue, pages = all_pages(client, url(project, "/interventions"), viewer, limit=2)

    assert [r["run_id"] for r in queue] == [str(r) for r in escalated]
    assert pages == 2
    assert {r["saga_status"] for r in queue} == {"MANUAL_INTERVENTION"}
    assert [r["direction"] for r in queue] == ["FORWARD", "FORWARD", "FORWARD"]
