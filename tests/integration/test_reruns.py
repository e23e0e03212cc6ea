"""Rerunning finished runs over HTTP against a real PostgreSQL: one run, every run a filter
matches (a dry run, the rate), duplicates, refusals, roles, and the event's dedupe row."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from awooop.engine import reruns, runner
from awooop.workflows import registry
from tests.integration.conftest import queued_messages
from tests.support import db, tokens, waiting
from tests.support import runs as test_runs


@pytest.fixture
def roles(engine, project):
    return tokens.all_roles(engine, project["project_id"])


def headers(token: str, key: str | None = None) -> dict[str, str]:
    extra = {"Content-Type": "application/json"}
    if key is not None:
        extra["Idempotency-Key"] = key
    return tokens.bearer(token, **extra)


def path(project, suffix: str) -> str:
    return f"/v1/projects/{project['project_id']}{suffix}"


def finished_run(engine, settings, project, workflow: str = "noop-3", **event) -> uuid.UUID:
    run_id = test_runs.admit(engine, project["project_id"], workflow, event or None)
    assert runner.execute(engine, settings, run_id) in (
        runner.Outcome.COMPLETED,
        runner.Outcome.FAILED,
    )
    return run_id


def rerun(client, project, run_id, token, key="k-1", body=None):
    return client.post(
        path(project, f"/runs/{run_id}/rerun"), headers=headers(token, key), json=body or {}
    )


def bulk(client, project, token, key="bulk-1", **body):
    return client.post(path(project, "/runs/rerun"), headers=headers(token, key), json=body)


def test_a_rerun_starts_a_new_run_with_the_original_s_input_linked_both_ways(
    client, engine, project, settings, roles, redis_client
):
    original = finished_run(engine, settings, project, "test-fail")
    assert db.run(engine, original)["status"] == "FAILED"

    response = rerun(client, project, original, roles["operator"], body={"reason": "fixed"})

    assert response.status_code == 202, response.json
    new_id = response.json["run_id"]
    assert response.json["rerun_of"] == str(original)
    assert response.json["status"] == "PENDING"
    new, old = db.run(engine, new_id), db.run(engine, original)
    assert new["input"] == old["input"]
    assert (new["workflow_name"], new["workflow_version"], new["channel_type"]) == (
        old["workflow_name"],
        old["workflow_version"],
        old["channel_type"],
    )
    assert (new["rerun_of"], new["rerun_key"]) == (original, "k-1")
    assert queued_messages(redis_client) == 1  # nudged at once
    shown = client.get(
        path(project, f"/runs/{original}"), headers=tokens.bearer(roles["viewer"])
    ).json
    assert [r["run_id"] for r in shown["reruns"]] == [new_id]
    assert shown["rerun_of"] is None
    detail = client.get(path(project, f"/runs/{new_id}"), headers=tokens.bearer(roles["viewer"]))
    assert detail.json["rerun_of"] == str(original)
    audit = [e for e in db.events(engine, original) if e["kind"] == "management"]
    assert audit[-1]["detail"]["operation"] == "rerun"
    assert audit[-1]["detail"]["rerun_run_id"] == new_id
    assert audit[-1]["detail"]["reason"] == "fixed"
    # and a worker runs it
    assert runner.execute(engine, settings, uuid.UUID(new_id)) == runner.Outcome.FAILED


def test_a_rerun_leaves_the_event_s_dedupe_row_alone(client, engine, project, settings, roles):
    # Given a run the API channel admitted under an Idempotency-Key, finished
    admit = {
        "path": path(project, "/runs"),
        "headers": tokens.bearer(project["api_token"], **{"Idempotency-Key": "event-7"}),
        "json": {"host": "db-1"},
    }
    admitted = client.post(**admit)
    assert admitted.status_code == 202
    original = uuid.UUID(admitted.json["run_id"])
    runner.execute(engine, settings, original)
    assert db.run(engine, original)["status"] in ("COMPLETED", "FAILED")
    before = db.rows(engine, "SELECT * FROM awooop_channel_event_dedupe")

    # When it is rerun
    assert rerun(client, project, original, roles["operator"]).status_code == 202

    # Then the event's dedupe row is as it was, and no other was written
    assert db.rows(engine, "SELECT * FROM awooop_channel_event_dedupe") == before
    assert [r["run_id"] for r in before] == [original]
    # and the event is still a duplicate for its provider: a retry answers the original run
    again = client.post(**admit)
    assert again.status_code == 200
    assert again.json["run_id"] == str(original)
    assert again.json["code"] == "E-IDEMPOTENT-001"


def test_the_same_rerun_request_again_is_a_duplicate_never_a_second_run(
    client, engine, project, settings, roles
):
    original = finished_run(engine, settings, project)
    first = rerun(client, project, original, roles["operator"], key="same")

    again = rerun(client, project, original, roles["admin"], key="same")

    assert again.status_code == 200
    assert again.json["code"] == "E-IDEMPOTENT-001"
    assert again.json["run_id"] == first.json["run_id"]
    assert db.count(engine, "awooop_run_state", "rerun_of IS NOT NULL") == 1
    # another key is another rerun
    assert rerun(client, project, original, roles["operator"], key="other").status_code == 202


def test_the_same_key_for_another_rerun_request_is_refused(
    client, engine, project, settings, roles
):
    one, two = (finished_run(engine, settings, project) for _ in range(2))
    assert rerun(client, project, one, roles["operator"], key="k").status_code == 202

    refused = rerun(client, project, two, roles["operator"], key="k")

    assert refused.status_code == 422
    assert refused.json["error"]["code"] == "E-IDEMPOTENT-002"
    assert db.count(engine, "awooop_run_state", "rerun_of IS NOT NULL") == 1


def test_an_unfinished_run_cannot_be_rerun(client, engine, project, roles):
    pending = test_runs.admit(engine, project["project_id"])

    refused = rerun(client, project, pending, roles["operator"])

    assert refused.status_code == 409
    assert refused.json["error"]["code"] == "E-RERUN-001"
    assert db.count(engine, "awooop_run_state") == 1


def test_a_run_whose_version_is_no_longer_registered_cannot_be_rerun(
    client, engine, project, settings, roles
):
    original = finished_run(engine, settings, project)
    db.set_run(engine, original, workflow_version=999)

    refused = rerun(client, project, original, roles["operator"])

    assert refused.status_code == 422
    assert refused.json["error"]["code"] == "E-WORKFLOW-002"
    assert db.count(engine, "awooop_run_state") == 1


@pytest.mark.parametrize(
    ("role", "single", "many"),
    [("viewer", 403, 403), ("ingest", 403, 403), ("operator", 202, 403), ("admin", 202, 202)],
)
def test_single_rerun_is_for_operators_and_admins_bulk_rerun_for_admins(
    client, engine, project, settings, roles, role, single, many
):
    original = finished_run(engine, settings, project)

    assert rerun(client, project, original, roles[role], key=f"one-{role}").status_code == single
    answer = bulk(client, project, roles[role], key=f"many-{role}", filters={"workflow": "noop-3"})
    assert answer.status_code == many
    if many == 403:
        assert answer.json["error"]["code"] == "E-AUTH-002"


def test_missing_run_key_or_bad_body_are_refused(client, engine, project, settings, roles):
    original = finished_run(engine, settings, project)
    operator = roles["operator"]

    no_key = client.post(
        path(project, f"/runs/{original}/rerun"), headers=headers(operator), json={}
    )
    assert no_key.status_code == 400 and no_key.json["error"]["code"] == "E-IDEMPOTENT-003"
    unknown = rerun(client, project, uuid.uuid4(), operator)
    assert unknown.status_code == 404
    bad_body = rerun(client, project, original, operator, body={"reason": 7})
    assert bad_body.status_code == 400
    extra_key = rerun(client, project, original, operator, body={"why": "x"})
    assert extra_key.status_code == 400
    assert db.count(engine, "awooop_run_state") == 1


def test_a_dry_run_counts_the_matching_finished_runs_and_writes_nothing(
    client, engine, project, settings, roles
):
    failed = [finished_run(engine, settings, project, "test-fail") for _ in range(3)]
    finished_run(engine, settings, project)  # completed: another filter
    test_runs.admit(engine, project["project_id"], "test-fail")  # unfinished: never matched
    counts = db.row_counts(engine)

    answer = client.post(
        path(project, "/runs/rerun"),
        headers=headers(roles["admin"]),
        json={"filters": {"workflow": "test-fail"}, "dry_run": True, "limit": 2},
    )

    assert answer.status_code == 200, answer.json
    assert answer.json["dry_run"] is True
    assert (answer.json["count"], answer.json["more"]) == (2, True)
    assert answer.json["run_ids"] == [str(r) for r in reversed(failed)][:2]
    assert db.row_counts(engine) == counts
    rest = client.post(
        path(project, "/runs/rerun"),
        headers=headers(roles["admin"]),
        json={
            "filters": {"workflow": "test-fail"},
            "dry_run": True,
            "limit": 2,
            "cursor": answer.json["next_cursor"],
        },
    )
    assert rest.json["run_ids"] == [str(failed[0])] and rest.json["more"] is False


def test_a_bulk_rerun_makes_the_runs_claimable_at_most_rate_per_second(
    client, engine, project, settings, roles, redis_client
):
    originals = [finished_run(engine, settings, project, "test-fail") for _ in range(6)]

    answer = bulk(client, project, roles["admin"], filters={"status": ["FAILED"]}, rate=2, limit=10)

    assert answer.status_code == 202, answer.json
    assert answer.json["count"] == 6
    made = answer.json["runs"]
    assert sorted(r["rerun_of"] for r in made) == sorted(str(r) for r in originals)
    rows = sorted(
        db.rows(
            engine,
            "SELECT run_id, available_at, created_at FROM awooop_run_state "
            "WHERE rerun_of IS NOT NULL",
        ),
        key=lambda r: r["available_at"],
    )
    starts = [r["available_at"] for r in rows]
    # one every half second from the request's instant: never two in the same half second
    assert [b - a for a, b in zip(starts, starts[1:], strict=False)] == [timedelta(seconds=0.5)] * 5
    assert starts[0] == rows[0]["created_at"]
    # the first is nudged now; each later one has a start timer due when it becomes claimable
    assert queued_messages(redis_client) == 1
    timers = db.rows(
        engine, "SELECT run_id, due_at FROM awooop_timer WHERE kind = 'start' ORDER BY due_at"
    )
    assert [t["due_at"] for t in timers] == starts[1:]
    # and a claim cannot take one before its time
    later = rows[-1]["run_id"]
    assert runner.execute(engine, settings, later) == runner.Outcome.NOT_CLAIMED
    assert runner.execute(engine, settings, rows[0]["run_id"]) == runner.Outcome.FAILED


def test_a_delayed_rerun_is_nudged_by_its_start_timer(client, engine, project, settings, roles):
    for _ in range(2):
        finished_run(engine, settings, project, "test-fail")
    answer = bulk(client, project, roles["admin"], filters={"workflow": "test-fail"}, rate=5)
    second = answer.json["runs"][1]["run_id"]

    fired = waiting.fire_when_due(engine, settings, uuid.UUID(second), "start")

    assert fired
    assert runner.execute(engine, settings, uuid.UUID(second)) == runner.Outcome.FAILED


def test_the_same_bulk_request_again_is_a_duplicate(client, engine, project, settings, roles):
    for _ in range(3):
        finished_run(engine, settings, project)
    first = bulk(client, project, roles["admin"], key="b", filters={"status": "COMPLETED"})
    assert first.status_code == 202 and first.json["count"] == 3

    again = bulk(client, project, roles["admin"], key="b", filters={"status": "COMPLETED"})

    assert again.status_code == 200
    assert again.json["code"] == "E-IDEMPOTENT-001"
    assert sorted(r["run_id"] for r in again.json["runs"]) == sorted(
        r["run_id"] for r in first.json["runs"]
    )
    assert db.count(engine, "awooop_run_state", "rerun_of IS NOT NULL") == 3
    other = bulk(client, project, roles["admin"], key="b", filters={"status": "FAILED"})
    assert other.status_code == 422


def test_bulk_rerun_finds_runs_by_tag(client, engine, project, settings, roles):
    tagged = test_runs.admit(
        engine, project["project_id"], "test-tags", {"tags": {"service": "db-1"}}
    )
    runner.execute(engine, settings, tagged)
    finished_run(engine, settings, project)

    answer = bulk(client, project, roles["admin"], filters={"tag": ["service:db-1"]})

    assert [r["rerun_of"] for r in answer.json["runs"]] == [str(tagged)]


@pytest.mark.parametrize(
    "body",
    [
        {"filters": {"status": "NOPE"}},
        {"filters": {"colour": "red"}},
        {"filters": {"status": 3}},
        {"filters": []},
        {"limit": 0},
        {"limit": reruns.MAX_LIMIT + 1},
        {"limit": True},
        {"rate": 0},
        {"rate": 8.55e-180},
        {"rate": reruns.MIN_RATE / 2},
        {"rate": 51},
        {"rate": "fast"},
        {"dry_run": "yes"},
        {"cursor": "not-a-cursor"},
        {"surprise": 1},
    ],
)
def test_a_bad_bulk_request_is_refused_and_writes_nothing(
    client, engine, project, settings, roles, body
):
    finished_run(engine, settings, project)

    # With a filter that matches: each request is refused for what is wrong with it.
    answer = bulk(client, project, roles["admin"], **{"filters": {"workflow": "noop-3"}, **body})

    assert answer.status_code == 400, answer.json
    assert answer.json["error"]["code"] == "E-REQUEST-001"
    assert db.count(engine, "awooop_run_state") == 1


def test_an_unknown_bulk_filter_is_named_as_a_filter(client, engine, project, settings, roles):
    finished_run(engine, settings, project)

    answer = bulk(client, project, roles["admin"], filters={"workflow": "noop-3", "colour": "red"})

    assert answer.status_code == 400
    message = answer.json["error"]["message"]
    assert message.startswith("unknown filter 'colour'; allowed: status, "), message
    assert db.count(engine, "awooop_run_state") == 1


def test_a_bulk_rerun_over_the_active_run_quota_is_refused_whole(
    client, engine, project, settings, roles
):
    for _ in range(3):
        finished_run(engine, settings, project)
    tokens.set_limits(engine, project["project_id"], max_active_runs=2)

    answer = bulk(client, project, roles["admin"], filters={"status": "COMPLETED"})

    assert answer.status_code == 429
    assert answer.json["error"]["code"] == "E-QUOTA-001"
    assert db.count(engine, "awooop_run_state", "rerun_of IS NOT NULL") == 0


def test_rerun_refuses_a_version_no_longer_registered_in_bulk_too(
    client, engine, project, settings, roles
):
    original = finished_run(engine, settings, project)
    finished_run(engine, settings, project)
    db.set_run(engine, original, workflow_version=999)
    assert registry.latest("noop-3") is not None

    answer = bulk(client, project, roles["admin"], filters={"workflow": "noop-3"})

    assert answer.status_code == 422
    assert db.count(engine, "awooop_run_state", "rerun_of IS NOT NULL") == 0
