"""Management operations over HTTP: effect, idempotency by operation_id, If-Match, the audit
row with actor and reason, refusals — against a real PostgreSQL and the test broker."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sqlalchemy import text

from awooop.config import Settings
from awooop.engine import runner
from awooop.web.app import create_app
from tests.integration.conftest import queued_messages
from tests.support import db, tokens
from tests.support import runs as test_runs


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, manual_close_enabled=1)


@pytest.fixture
def admin(engine, project):
    return tokens.add(engine, project["project_id"], "admin")


def post(client, project, run_id, segment, token, body=None, **headers):
    return client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/{segment}",
        headers=tokens.operation(token, **headers),
        data=json.dumps(
            {"operation_id": "op-1", "reason": "db-1 is on fire"} if body is None else body
        ),
    )


def _pending(engine, project, settings, tmp_path):
    return test_runs.admit(engine, project["project_id"])


def _paused(engine, project, settings, tmp_path):
    from awooop.engine import management

    run_id = test_runs.admit(engine, project["project_id"])
    management.operate(
        engine, settings, "pause", project["project_id"], run_id, operation_id="setup", actor="t"
    )
    return run_id


def _stuck_in_compensation(engine, project, settings, tmp_path):
    fixed = tmp_path / "fixed"
    run_id = test_runs.admit(
        engine, project["project_id"], "test-undo-needs-fix", {"fixed": str(fixed)}
    )
    runner.execute(engine, settings, run_id)
    fixed.touch()
    return run_id


def _escalated(workflow):
    def make(engine, project, settings, tmp_path):
        run_id = test_runs.admit(engine, project["project_id"], workflow)
        runner.execute(engine, settings, run_id)
        return run_id

    return make


# segment, setup, expected (status, saga_status, control_state) after, whether a nudge is sent
CASES = [
    ("pause", _pending, ("PENDING", "RUNNING", "PAUSED"), False),
    ("resume", _paused, ("PENDING", "RUNNING", "ACTIVE"), True),
    ("cancel", _pending, ("PENDING", "CANCELLING", "ACTIVE"), True),
    ("retry-compensation", _stuck_in_compensation, ("RESUMED", "COMPENSATING", "ACTIVE"), True),
    (
        "retry-resolution",
        _escalated("test-no-resolver"),
        ("RESUMED", "WAITING_RESOLUTION", "ACTIVE"),
        True,
    ),
    ("manual-close", _escalated("test-halt"), ("CANCELLED", "MANUALLY_CLOSED", "ACTIVE"), False),
]


@pytest.mark.parametrize(("segment", "setup", "after", "nudges"), CASES, ids=[c[0] for c in CASES])
def test_each_operation_applies_once_per_operation_id_and_is_audited_with_actor_and_reason(
    client, engine, project, settings, redis_client, admin, tmp_path, segment, setup, after, nudges
):
    run_id = setup(engine, project, settings, tmp_path)
    version = db.run(engine, run_id)["version"]
    redis_client.flushdb()

    first = post(client, project, run_id, segment, admin)
    again = post(client, project, run_id, segment, admin)

    assert first.status_code == 200, first.json
    assert (first.json["applied"], first.json["replayed"]) == (True, False)
    assert (first.json["status"], first.json["saga_status"], first.json["control_state"]) == after
    assert first.json["version"] == version + 1
    assert first.headers["ETag"] == f'"{version + 1}"'
    assert again.status_code == 200
    assert (again.json["applied"], again.json["replayed"]) == (False, True)
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["control_state"]) == after
    assert row["version"] == version + 1
    audit = [e for e in db.events(engine, run_id) if e["trigger_id"] == "op-1"]
    assert len(audit) == 1
    assert audit[0]["actor"].startswith("api-token:")
    assert audit[0]["detail"] == {
        "operation": segment.replace("-", "_"),
        "reason": "db-1 is on fire",
    }
    assert queued_messages(redis_client) == (1 if nudges else 0)


def test_the_actor_is_the_calling_tokens_credential(client, engine, project, admin):
    run_id = test_runs.admit(engine, project["project_id"])

    post(client, project, run_id, "pause", admin)

    with engine.connect() as conn:
        credential_id = conn.execute(
            text("SELECT credential_id FROM awooop_credential WHERE role = 'admin'")
        ).scalar_one()
    audit = [e for e in db.events(engine, run_id) if e["trigger"] == "operator"]
    assert [e["actor"] for e in audit] == [f"api-token:{credential_id}"]
    assert project["api_token"] not in json.dumps([str(e) for e in db.events(engine, run_id)])


@pytest.mark.parametrize("if_match", ['"{v}"', "{v}"])
def test_if_match_with_the_current_version_applies(client, engine, project, admin, if_match):
    run_id = test_runs.admit(engine, project["project_id"])
    version = db.run(engine, run_id)["version"]

    response = post(
        client, project, run_id, "pause", admin, **{"If-Match": if_match.format(v=version)}
    )

    assert response.status_code == 200, response.json
    assert db.run(engine, run_id)["control_state"] == "PAUSED"


def test_if_match_with_a_stale_version_is_412_and_changes_nothing(client, engine, project, admin):
    run_id = test_runs.admit(engine, project["project_id"])
    before = db.run(engine, run_id)

    response = post(
        client, project, run_id, "pause", admin, **{"If-Match": f'"{before["version"] + 1}"'}
    )

    assert response.status_code == 412
    assert response.json["error"]["code"] == "E-OPERATION-002"
    assert db.run(engine, run_id) == before
    assert [e for e in db.events(engine, run_id) if e["trigger"] == "operator"] == []


def test_a_retry_after_success_is_a_replay_even_with_the_now_stale_if_match(
    client, engine, project, admin
):
    run_id = test_runs.admit(engine, project["project_id"])
    etag = client.get(
        f"/v1/projects/{project['project_id']}/runs/{run_id}", headers=tokens.bearer(admin)
    ).headers["ETag"]

    first = post(client, project, run_id, "pause", admin, **{"If-Match": etag})
    again = post(client, project, run_id, "pause", admin, **{"If-Match": etag})

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json["replayed"] is True


def test_a_failed_precondition_is_409_and_changes_nothing(client, engine, project, admin):
    run_id = test_runs.admit(engine, project["project_id"])
    before = db.run(engine, run_id)

    response = post(client, project, run_id, "retry-compensation", admin)

    assert response.status_code == 409
    assert response.json["error"]["code"] == "E-OPERATION-001"
    assert "PENDING" in response.json["error"]["message"]
    assert db.run(engine, run_id) == before


def test_manual_close_is_409_while_disabled(engine, project, settings, admin, redis_client):
    disabled = dataclasses.replace(settings, manual_close_enabled=0)
    client = create_app(disabled, engine).test_client()
    run_id = _escalated("test-halt")(engine, project, settings, None)
    before = db.run(engine, run_id)

    response = post(client, project, run_id, "manual-close", admin)

    assert response.status_code == 409
    assert response.json["error"]["code"] == "E-OPERATION-003"
    assert db.run(engine, run_id) == before


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        ({"reason": "no id"}, {}, 400, "E-OPERATION-004"),
        ({"operation_id": ""}, {}, 400, "E-OPERATION-004"),
        ({"operation_id": 7}, {}, 400, "E-OPERATION-004"),
        ({"operation_id": "x" * 129}, {}, 400, "E-OPERATION-004"),
        ({"operation_id": "ok", "reason": ["not", "text"]}, {}, 400, "E-REQUEST-001"),
        ({"operation_id": "ok", "reason": "r" * 1001}, {}, 400, "E-REQUEST-001"),
        ({"operation_id": "ok"}, {"If-Match": "version-3"}, 400, "E-REQUEST-001"),
        ({"operation_id": "ok"}, {"Content-Type": "text/plain"}, 415, "E-REQUEST-003"),
        ("[1, 2]", {}, 400, "E-REQUEST-001"),
    ],
)
def test_bad_operation_requests_are_4xx_and_change_nothing(
    client, engine, project, admin, body, headers, status, code
):
    run_id = test_runs.admit(engine, project["project_id"])
    before = db.run(engine, run_id)

    response = client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/pause",
        headers=tokens.operation(admin, **headers),
        data=body if isinstance(body, str) else json.dumps(body),
    )

    assert response.status_code == status, response.json
    assert response.json["error"]["code"] == code
    assert db.run(engine, run_id) == before


def test_an_unknown_run_is_404(client, project, admin):
    for run_id in ("00000000-0000-0000-0000-000000000000", "nope"):
        response = post(client, project, run_id, "pause", admin)
        assert response.status_code == 404
        assert response.json["error"]["code"] == "E-NOT-FOUND-001"


def test_an_unknown_operation_is_404(client, engine, project, admin):
    run_id = test_runs.admit(engine, project["project_id"])

    response = post(client, project, run_id, "explode", admin)

    assert response.status_code == 404
    assert db.run(engine, run_id)["version"] == 0


def test_an_operation_id_used_for_another_operation_is_refused(
    client, engine, project, settings, admin
):
    run_id = test_runs.admit(engine, project["project_id"])
    first = post(client, project, run_id, "pause", admin)
    other = post(client, project, run_id, "cancel", admin)  # same operation_id "op-1"

    assert first.status_code == 200
    assert (other.status_code, other.json["error"]["code"]) == (422, "E-OPERATION-005")
    row = db.run(engine, run_id)
    assert (row["control_state"], row["saga_status"]) == ("PAUSED", "RUNNING")
    assert post(client, project, run_id, "pause", admin).json["replayed"] is True
