"""Finding runs: the runs list's filters by event id, by idempotency key and by the tags steps
set (ctx.tag), against a real PostgreSQL — with the tags written under the step's lease."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from awooop.domain import tags
from awooop.engine import reruns, runner
from awooop.store import leases
from tests.support import db, tokens, waiting
from tests.support import runs as test_runs
from tests.support import workflows as wf


@pytest.fixture
def viewer(engine, project):
    return tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))


def listed(client, project, headers, **query) -> list[str]:
    response = client.get(
        f"/v1/projects/{project['project_id']}/runs", headers=headers, query_string=query
    )
    assert response.status_code == 200, response.json
    return [run["run_id"] for run in response.json["runs"]]


def tagged_run(engine, settings, project, run_tags, **event) -> uuid.UUID:
    run_id = test_runs.admit(
        engine, project["project_id"], "test-tags", {"tags": run_tags, **event}
    )
    runner.execute(engine, settings, run_id)
    return run_id


def test_a_step_s_tags_are_recorded_on_the_run_and_in_its_journal(engine, project, settings):
    run_id = tagged_run(
        engine, settings, project, {"service": "db-1"}, more_tags={"host": "x", "k8s.ns": "web"}
    )

    row = db.run(engine, run_id)
    assert row["status"] == "COMPLETED"
    assert row["tags"] == {"service": "db-1", "host": "x", "k8s.ns": "web"}
    assert [e.get("tags") for e in row["saga_steps"]] == [
        {"service": "db-1"},
        {"host": "x", "k8s.ns": "web"},
    ]


def test_a_later_value_of_a_tag_replaces_the_earlier_one(engine, project, settings):
    run_id = tagged_run(
        engine, settings, project, {"service": "db-1"}, more_tags={"service": "db-2"}
    )

    assert db.run(engine, run_id)["tags"] == {"service": "db-2"}


def test_the_list_finds_runs_by_tags_all_of_them(client, engine, project, settings, viewer):
    both = tagged_run(engine, settings, project, {"service": "db-1", "host": "x"})
    service_only = tagged_run(engine, settings, project, {"service": "db-1", "host": "y"})
    tagged_run(engine, settings, project, {"service": "db-2"})
    untagged = test_runs.admit(engine, project["project_id"])

    assert listed(client, project, viewer, tag="service:db-1") == [
        str(service_only),
        str(both),
    ]
    assert listed(client, project, viewer, tag=["service:db-1", "host:x"]) == [str(both)]
    assert listed(client, project, viewer, tag="service:db-3") == []
    assert str(untagged) in listed(client, project, viewer)
    rows = client.get(
        f"/v1/projects/{project['project_id']}/runs",
        headers=viewer,
        query_string={"tag": "host:x"},
    ).json["runs"]
    assert rows[0]["tags"] == {"service": "db-1", "host": "x"}


def test_the_list_finds_runs_by_provider_event_id_and_idempotency_key(
    client, engine, project, settings, viewer
):
    pid = project["project_id"]
    api_run = test_runs.admit(engine, pid)
    telegram_run = test_runs.admit(engine, pid, channel="telegram")
    test_runs.admit(engine, pid)
    event_of = {
        run: db.run(engine, run)["input"]["provider_event_id"] for run in (api_run, telegram_run)
    }

    assert listed(client, project, viewer, provider_event_id=event_of[api_run]) == [str(api_run)]
    assert listed(client, project, viewer, provider_event_id=event_of[telegram_run]) == [
        str(telegram_run)
    ]
    # the API channel's event id is the Idempotency-Key the run was started with; a
    # webhook's event id is not a key anyone chose
    assert listed(client, project, viewer, idempotency_key=event_of[api_run]) == [str(api_run)]
    assert listed(client, project, viewer, idempotency_key=event_of[telegram_run]) == []
    assert listed(client, project, viewer, provider_event_id="no-such-event") == []


def test_a_rerun_is_found_by_the_original_s_event_and_by_its_own_key_only(
    client, engine, project, settings, viewer
):
    pid = project["project_id"]
    original = test_runs.admit(engine, pid)
    runner.execute(engine, settings, original)
    rerun = reruns.rerun_run(
        engine, pid, original, key="rerun-key-1", request_digest="d", actor="test"
    ).runs[0]
    event_id = db.run(engine, original)["input"]["provider_event_id"]

    assert listed(client, project, viewer, provider_event_id=event_id) == [
        str(rerun.run_id),
        str(original),
    ]
    assert listed(client, project, viewer, idempotency_key=event_id) == [str(original)]
    assert listed(client, project, viewer, idempotency_key="rerun-key-1") == [str(rerun.run_id)]


@pytest.mark.parametrize(
    "query",
    [
        {"tag": "service"},  # no colon
        {"tag": "9lives:x"},  # not an identifier
        {"tag": f"{'k' * 65}:x"},
        {"tag": f"k:{'v' * 257}"},
        {"tag": ["service:a", "service:b"]},
        {"tag": [f"k{i}:v" for i in range(tags.MAX_TAGS + 1)]},
        {"provider_event_id": "x" * 257},
        {"idempotency_key": "k" * 256},
        {"tags": "service:db-1"},  # not a parameter
    ],
)
def test_bad_find_filters_are_refused_with_400(client, project, viewer, query):
    response = client.get(
        f"/v1/projects/{project['project_id']}/runs", headers=viewer, query_string=query
    )

    assert response.status_code == 400
    assert response.json["error"]["code"] == "E-REQUEST-001"


def _plan(engine, sql: str, **params) -> str:
    with engine.connect() as conn:
        rows = conn.execute(text(f"EXPLAIN {sql}"), params).scalars().all()
    return "\n".join(rows)


def test_the_find_filters_are_served_by_their_indexes(engine, project, settings):
    """On a project with many runs, each find filter is an index probe, not a walk of the
    project's runs."""
    from awooop.store import queries

    db.execute(
        engine,
        "INSERT INTO awooop_run_state (run_id, project_id, channel_type, workflow_name, "
        "workflow_version, workflow_digest, input, tags, rerun_of, rerun_key) "
        "SELECT gen_random_uuid(), :p, 'api', 'noop-3', 1, 'x', "
        "jsonb_build_object('provider_event_id', 'e' || g), "
        "CASE WHEN g % 100 = 0 THEN jsonb_build_object('service', 'db-' || g) END, "
        "CASE WHEN g % 50 = 0 THEN gen_random_uuid() END, "
        "CASE WHEN g % 50 = 0 THEN 'k' || g END "
        "FROM generate_series(1, 20000) g",
        p=project["project_id"],
    )
    db.execute(engine, "ANALYZE awooop_run_state")
    listing = queries._LIST_RUNS.text.replace(":limit", "50")
    filters = (
        "statuses saga_statuses workflow channel created_from created_until finished_from "
        "finished_until failure_code after_created_at after_run_id provider_event_id "
        "idempotency_key tags"
    )
    base: dict[str, object] = dict.fromkeys(filters.split())
    base["project_id"] = project["project_id"]
    by_event = _plan(engine, listing, **{**base, "provider_event_id": "e77"})
    assert "ix_awooop_run_state_provider_event" in by_event
    by_key = _plan(engine, listing, **{**base, "idempotency_key": "k100"})
    assert "ix_awooop_run_state_provider_event" in by_key
    assert "uq_awooop_run_state_rerun_key" in by_key
    by_tag = _plan(engine, listing, **{**base, "tags": '{"service": "db-700"}'})
    assert "ix_awooop_run_state_tags" in by_tag


@pytest.mark.parametrize(
    ("event", "what"),
    [
        ({"tags": {"9lives": "x"}}, "must be 1 to 64 characters"),
        ({"tags": {"service": "v" * 257}}, "at most 256 printable characters"),
        ({"tags": {"service": 7}}, "at most 256 printable characters"),
        (
            {
                "tags": {f"k{i}": "v" for i in range(10)},
                "more_tags": {f"m{i}": "v" for i in range(7)},
            },
            "a run has at most 16 tags; this would make 17",
        ),
    ],
)
def test_a_tag_beyond_the_bounds_fails_the_step_without_retries(
    engine, project, settings, event, what
):
    run_id = test_runs.admit(engine, project["project_id"], "test-tags", event)

    assert runner.execute(engine, settings, run_id) == runner.Outcome.FAILED

    row = db.run(engine, run_id)
    failed = [e for e in row["saga_steps"] if e.get("status") == "FAILED"]
    assert len(failed) == 1  # not retried
    assert failed[0]["error"].startswith("TagError: ") and what in failed[0]["error"]


def test_a_worker_whose_lease_was_taken_writes_no_tags(engine, project, settings):
    # Given a worker in the tagging step, holding its gate, after it tagged the run
    gate = uuid.uuid4().hex
    wf.GATES[gate] = threading.Event()
    run_id = test_runs.admit(
        engine, project["project_id"], "test-tags", {"tags": {"service": "stale"}, "gate": gate}
    )
    worker, outcome = test_runs.execute_in_thread(engine, settings, run_id)
    try:
        waiting.until(
            lambda: db.run(engine, run_id)["status"] == "RUNNING", what="the first worker's claim"
        )
        # When its lease is taken from it (as the reaper does once it expired: one statement,
        # so no renewal slips in) and another worker claims the run
        db.execute(
            engine,
            "UPDATE awooop_run_state SET status = 'PENDING', "
            "lease_until = now() - interval '1 second' WHERE run_id = :r",
            r=run_id,
        )
        with engine.connect() as conn:
            taken = leases.claim(conn, "other-worker:1:x", 30.0, run_id)
        assert taken is not None
    finally:
        wf.GATES[gate].set()
        worker.join(timeout=20)

    # Then the first worker's record matched no row: no tag of its attempt was written
    assert outcome == [runner.Outcome.LEASE_LOST]
    row = db.run(engine, run_id)
    assert row["tags"] is None
    assert row["saga_steps"] == []
    assert row["worker_id"] == "other-worker:1:x"
