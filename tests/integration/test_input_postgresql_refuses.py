"""Input that Python accepts and PostgreSQL refuses is a 4xx (or is made acceptable), never a
500 — found by the OpenAPI property-based run (``tests/e2e/test_openapi_processes.py``).

``text`` and ``jsonb`` cannot hold U+0000; UTF-8 cannot encode an unpaired surrogate (valid
JSON as ``\\ud800``); ``NaN``, ``Infinity`` and numbers beyond a double are not JSON that
PostgreSQL accepts, though Python's parser reads them; a URL-decoded path segment may hold
U+0000 too; PostgreSQL takes UTC offsets up to 15:59, Python up to 23:59.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.test_bad_input import CHANNELS, expect_error
from tests.support import db, requests, tokens
from tests.support import runs as test_runs

UNSTORABLE_STRINGS = {"nul": "a\x00b", "lone-surrogate": "a\ud800b"}


def with_extra(raw: bytes, key: str, value: object) -> bytes:
    payload = json.loads(raw)
    payload[key] = value
    return json.dumps(payload).encode()  # ensure_ascii: \u0000 and \ud800 as escapes


@pytest.fixture
def admin(engine, project):
    return tokens.add(engine, project["project_id"], "admin")


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("where", ["value", "key"])
@pytest.mark.parametrize("text", UNSTORABLE_STRINGS.values(), ids=UNSTORABLE_STRINGS.keys())
def test_an_unstorable_string_in_an_event_is_400_and_writes_nothing(
    client, engine, project, channel, where, text
):
    path, headers, raw = requests.valid(channel, project)
    raw = with_extra(raw, text, 1) if where == "key" else with_extra(raw, "note", [{"x": text}])

    response = client.post(path, headers=requests.resign(project, path, headers, raw), data=raw)

    expect_error(response, 400, "E-REQUEST-001")
    assert db.count(engine, "awooop_run_state") == 0


@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"NaN", b"Infinity", b"-Infinity"])
def test_a_number_postgresql_cannot_store_is_400(client, engine, project, number):
    path, headers, _ = requests.api(project)
    raw = b'{"summary": "disk full", "value": ' + number + b"}"

    expect_error(client.post(path, headers=headers, data=raw), 400, "E-REQUEST-001")
    assert db.count(engine, "awooop_run_state") == 0


@pytest.mark.parametrize("text", UNSTORABLE_STRINGS.values(), ids=UNSTORABLE_STRINGS.keys())
@pytest.mark.parametrize("field", ["operation_id", "reason"])
def test_an_unstorable_string_in_a_management_operation_is_400(
    client, engine, project, admin, field, text
):
    run_id = test_runs.admit(engine, project["project_id"])
    body = {"operation_id": "op-1", "reason": "why", field: text}

    response = client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/pause",
        headers=tokens.operation(admin),
        data=json.dumps(body),
    )

    expect_error(response, 400, "E-REQUEST-001")
    assert db.run(engine, run_id)["control_state"] == "ACTIVE"


@pytest.mark.parametrize("text", UNSTORABLE_STRINGS.values(), ids=UNSTORABLE_STRINGS.keys())
def test_an_unstorable_tool_result_is_400(client, engine, project, admin, text):
    run_id = test_runs.admit(engine, project["project_id"])
    body = {"event_id": text, "step": "call", "status": "succeeded", "output": {}}

    response = client.post(
        f"/v1/projects/{project['project_id']}/runs/{run_id}/tool-results",
        headers=tokens.operation(admin),
        data=json.dumps(body),
    )

    expect_error(response, 400, "E-REQUEST-001")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/projects/a%00b/runs",
        "/v1/projects/a%00b/interventions",
        "/v1/projects/a%00b/runs/00000000-0000-0000-0000-000000000000",
    ],
)
def test_a_project_id_that_cannot_exist_answers_like_an_unknown_project(client, admin, path):
    expect_error(client.get(path, headers=tokens.bearer(admin)), 401, "E-AUTH-001")


def test_a_webhook_for_a_project_id_that_cannot_exist_answers_like_an_unknown_project(
    client, project
):
    path, headers, raw = requests.telegram(project)
    path = path.replace(project["project_id"], "a%00b")

    expect_error(client.post(path, headers=headers, data=raw), 401, "E-AUTH-001")


def test_a_time_filter_with_an_offset_beyond_postgresqls_range_is_read_in_utc(
    client, engine, project, admin
):
    run_id = test_runs.admit(engine, project["project_id"])

    response = client.get(
        f"/v1/projects/{project['project_id']}/runs",
        headers=tokens.bearer(admin),
        query_string={"created_from": "0500-05-06T05:15:22.38-22:28"},
    )

    assert response.status_code == 200
    assert [r["run_id"] for r in response.json["runs"]] == [str(run_id)]


def test_a_time_filter_out_of_range_in_utc_is_400(client, project, admin):
    response = client.get(
        f"/v1/projects/{project['project_id']}/runs",
        headers=tokens.bearer(admin),
        query_string={"created_until": "9999-12-31T23:59:59-23:59"},
    )

    expect_error(response, 400, "E-REQUEST-001")
