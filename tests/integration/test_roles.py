"""Roles and tenant isolation: every endpoint × every role is allowed or 403; another
project's run is a 404 on every run endpoint; bad or foreign tokens are 401."""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass

import pytest

from awooop import cli
from awooop.config import Settings
from tests.support import db, requests, tokens
from tests.support import runs as test_runs

ALL_ROLES = ("viewer", "operator", "admin", "ingest")
READ = {"viewer", "operator", "admin"}
OPERATE = {"operator", "admin"}
ADMIT = {"ingest", "operator", "admin"}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # {p}: the project, {run}: a run of it
    allowed: set[str]
    body: dict | None = None

    def call(self, client, project_id, run_id, headers):
        path = self.path.format(p=project_id, run=run_id)
        if self.method == "GET":
            return client.get(path, headers=headers)
        body = dict(self.body or {})
        if "operation_id" in body:
            body["operation_id"] = uuid.uuid4().hex
        return client.post(
            path,
            headers={**headers, "Content-Type": "application/json"},
            data=json.dumps(body),
        )


def _operation(segment: str, allowed: set[str]) -> Endpoint:
    return Endpoint(
        "POST",
        f"/v1/projects/{{p}}/runs/{{run}}/{segment}",
        allowed,
        {"operation_id": "x", "reason": "role matrix"},
    )


RUN_ENDPOINTS = [
    Endpoint("GET", "/v1/projects/{p}/runs/{run}", READ),
    Endpoint("GET", "/v1/projects/{p}/runs/{run}/events", READ),
    _operation("pause", OPERATE),
    _operation("resume", OPERATE),
    _operation("cancel", OPERATE),
    _operation("retry-compensation", OPERATE),
    _operation("retry-resolution", OPERATE),
    _operation("manual-close", {"admin"}),
    Endpoint(
        "POST",
        "/v1/projects/{p}/runs/{run}/tool-results",
        ADMIT,
        {"event_id": "e-1", "step": "nope", "status": "succeeded", "output": {}},
    ),
]
PROJECT_ENDPOINTS = [
    Endpoint("GET", "/v1/projects/{p}/runs", READ),
    Endpoint("GET", "/v1/projects/{p}/interventions", READ),
]
ENDPOINTS = RUN_ENDPOINTS + PROJECT_ENDPOINTS


def _id(endpoint: Endpoint) -> str:
    return f"{endpoint.method} {endpoint.path.split('{p}')[1] or '/'}"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Manual close enabled, so every operation reaches its run (and can be a 404)."""
    return dataclasses.replace(settings, manual_close_enabled=1)


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_id)
@pytest.mark.parametrize("role", ALL_ROLES)
def test_each_endpoint_allows_its_roles_and_forbids_the_others(
    client, engine, project, role_tokens, endpoint, role
):
    run_id = test_runs.admit(engine, project["project_id"])

    response = endpoint.call(
        client, project["project_id"], run_id, tokens.bearer(role_tokens[role])
    )

    if role in endpoint.allowed:
        assert response.status_code not in (401, 403, 404), response.json
    else:
        assert response.status_code == 403, response.json
        assert response.json["error"]["code"] == "E-AUTH-002"


@pytest.mark.parametrize("role", ALL_ROLES)
def test_admission_allows_ingest_operator_admin_and_forbids_viewer(
    client, engine, project, role_tokens, role
):
    path, headers, raw = requests.api(project, key=f"k-{role}")
    headers["Authorization"] = f"Bearer {role_tokens[role]}"

    response = client.post(path, headers=headers, data=raw)

    assert response.status_code == (202 if role in ADMIT else 403), response.json


@pytest.mark.parametrize("endpoint", RUN_ENDPOINTS, ids=_id)
def test_another_projects_run_is_not_found_on_every_run_endpoint(
    client, engine, project, settings, endpoint
):
    other = cli.create_project(settings, f"other-{uuid.uuid4().hex[:6]}")
    foreign_run = test_runs.admit(engine, other["project_id"])
    admin = tokens.add(engine, project["project_id"], "admin")
    before = db.run(engine, foreign_run)

    response = endpoint.call(client, project["project_id"], foreign_run, tokens.bearer(admin))

    assert response.status_code == 404, response.json
    assert response.json["error"]["code"] == "E-NOT-FOUND-001"
    assert str(foreign_run) not in response.get_data(as_text=True)
    assert db.run(engine, foreign_run) == before


def test_lists_never_show_another_projects_runs(client, engine, project, settings):
    other = cli.create_project(settings, f"other-{uuid.uuid4().hex[:6]}")
    mine = test_runs.admit(engine, project["project_id"])
    test_runs.admit(engine, other["project_id"])
    viewer = tokens.bearer(tokens.add(engine, project["project_id"], "viewer"))

    listed = client.get(f"/v1/projects/{project['project_id']}/runs", headers=viewer).json

    assert [r["run_id"] for r in listed["runs"]] == [str(mine)]


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_id)
def test_a_token_of_another_project_or_no_token_is_401_like_an_unknown_project(
    client, engine, project, settings, endpoint
):
    other = cli.create_project(settings, f"other-{uuid.uuid4().hex[:6]}")
    run_id = test_runs.admit(engine, project["project_id"])
    foreign_admin = tokens.add(engine, other["project_id"], "admin")

    answers = [
        endpoint.call(client, project["project_id"], run_id, tokens.bearer(foreign_admin)),
        endpoint.call(client, project["project_id"], run_id, {}),
        endpoint.call(client, project["project_id"], run_id, tokens.bearer("made-up")),
        endpoint.call(client, "no-such-project", run_id, tokens.bearer(foreign_admin)),
    ]

    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    assert len({json.dumps(a.json) for a in answers}) == 1  # nothing tells them apart


def test_the_same_idempotency_key_in_two_projects_makes_two_runs(client, engine, settings):
    first = cli.create_project(settings, "tenant-a")
    second = cli.create_project(settings, "tenant-b")

    answers = [
        client.post(path, headers=headers, data=raw)
        for path, headers, raw in (
            requests.api(first, key="shared-key"),
            requests.api(second, key="shared-key"),
        )
    ]

    assert [a.status_code for a in answers] == [202, 202]
    assert answers[0].json["run_id"] != answers[1].json["run_id"]
    assert db.count(engine, "awooop_run_state") == 2
    for tenant, answer in zip((first, second), answers, strict=True):
        assert db.run(engine, answer.json["run_id"])["project_id"] == tenant["project_id"]
