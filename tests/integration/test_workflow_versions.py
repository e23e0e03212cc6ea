"""Open runs per workflow version: ``GET /v1/projects/{project_id}/workflows`` and the
console's Workflows page, against real runs in PostgreSQL."""

from __future__ import annotations

import re
import uuid

import pytest

from awooop import cli
from awooop.domain.workflow import Step, StepContext, Workflow
from awooop.engine import runner
from awooop.store import admission
from awooop.workflows import registry
from tests.support import db, tokens
from tests.support import runs as test_runs
from tests.support.console import login, text


def _check(ctx: StepContext) -> dict[str, bool]:
    return {"checked": True}


def _check_twice(ctx: StepContext) -> dict[str, bool]:
    return {"checked": True}


# Two versions registered side by side (names of their own: registrations last the session).
V1 = registry.register(Workflow("test-versions", 1, [Step("check", _check)]))
V2 = registry.register(
    Workflow(
        "test-versions",
        2,
        [Step("check", _check), Step("again", _check_twice)],
        description="checks twice",
    )
)


def admit(engine, project_id: str, wf: Workflow) -> uuid.UUID:
    with engine.begin() as conn:
        result = admission.admit(conn, test_runs.new_run(project_id, wf))
    return result.run_id


def listed(client, project_id: str, token: str) -> dict[tuple[str, int], dict]:
    response = client.get(f"/v1/projects/{project_id}/workflows", headers=tokens.bearer(token))
    assert response.status_code == 200, response.get_json()
    return {(w["name"], w["version"]): w for w in response.get_json()["workflows"]}


@pytest.fixture
def viewer(engine, project) -> str:
    return tokens.add(engine, project["project_id"], "viewer")


def test_each_version_lists_the_projects_open_runs_on_it(client, engine, settings, project, viewer):
    # Given two open runs on v1, one on v2, one finished on v1, and another project's run on v1
    pid = project["project_id"]
    admit(engine, pid, V1)
    admit(engine, pid, V1)
    admit(engine, pid, V2)
    finished = admit(engine, pid, V1)
    assert runner.execute(engine, settings, finished) == runner.Outcome.COMPLETED
    other = cli.create_project(settings, f"p{uuid.uuid4().hex[:8]}")
    admit(engine, other["project_id"], V1)

    workflows = listed(client, pid, viewer)

    assert workflows[("test-versions", 1)] == {
        "name": "test-versions",
        "version": 1,
        "description": "",
        "registered": True,
        "digest": V1.digest,
        "latest": False,
        "open_runs": 2,
        "open_runs_other_digest": 0,
    }
    assert workflows[("test-versions", 2)] == {
        "name": "test-versions",
        "version": 2,
        "description": "checks twice",
        "registered": True,
        "digest": V2.digest,
        "latest": True,
        "open_runs": 1,
        "open_runs_other_digest": 0,
    }
    # every registered workflow is listed, with no open runs
    assert workflows[("noop-3", 1)]["open_runs"] == 0


def test_runs_on_a_version_or_digest_this_process_lacks_are_counted_as_such(
    client, engine, project, viewer
):
    pid = project["project_id"]
    stranded = admit(engine, pid, V1)
    changed = admit(engine, pid, V1)
    admit(engine, pid, V1)
    db.execute(
        engine, "UPDATE awooop_run_state SET workflow_version = 7 WHERE run_id = :r", r=stranded
    )
    db.execute(
        engine,
        "UPDATE awooop_run_state SET workflow_digest = :d WHERE run_id = :r",
        d="0" * 64,
        r=changed,
    )

    workflows = listed(client, pid, viewer)

    assert workflows[("test-versions", 7)] == {
        "name": "test-versions",
        "version": 7,
        "description": None,
        "registered": False,
        "digest": None,
        "latest": False,
        "open_runs": 1,
        "open_runs_other_digest": 1,
    }
    v1 = workflows[("test-versions", 1)]
    assert (v1["open_runs"], v1["open_runs_other_digest"]) == (2, 1)


def test_an_ingest_token_cannot_read_the_workflows_and_no_token_is_a_401(client, engine, project):
    pid = project["project_id"]
    ingest = tokens.add(engine, pid, "ingest")

    forbidden = client.get(f"/v1/projects/{pid}/workflows", headers=tokens.bearer(ingest))
    anonymous = client.get(f"/v1/projects/{pid}/workflows")

    assert (forbidden.status_code, forbidden.get_json()["error"]["code"]) == (403, "E-AUTH-002")
    assert (anonymous.status_code, anonymous.get_json()["error"]["code"]) == (401, "E-AUTH-001")


def test_an_unknown_query_parameter_is_refused(client, project, viewer):
    response = client.get(
        f"/v1/projects/{project['project_id']}/workflows?name=x", headers=tokens.bearer(viewer)
    )

    assert response.status_code == 400


def test_the_console_shows_each_versions_open_runs(client, engine, project, viewer):
    pid = project["project_id"]
    admit(engine, pid, V1)
    admit(engine, pid, V1)
    assert login(client, pid, viewer).status_code == 303

    page = client.get("/console/workflows")

    assert page.status_code == 200
    shown = " ".join(re.sub(r"<[^>]+>", " ", text(page)).split())  # the visible words
    assert "test-versions v1 2 yes" in shown
    assert f"test-versions checks twice v2 start here 0 yes {V2.digest[:12]} 0" in shown
    assert 'href="/console/runs?workflow=test-versions&amp;status=PENDING' in page.get_data(
        as_text=True
    )
