"""The Python client and `awooop runs` against a live web (gunicorn) and a Celery worker."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from awooop import client
from awooop.store import projects
from tests.support.processes import BIN, ROOT

pytestmark = pytest.mark.slow


@pytest.fixture
def live(stack, project):
    stack.worker()
    _, base = stack.web()
    return base, client.Client(base, project["api_token"], project["project_id"])


def test_a_started_workflow_runs_to_completion_and_a_retry_returns_the_same_run(live):
    _, api = live

    started = api.start("demo-api", {"summary": "disk almost full"}, key="ticket-1")
    again = api.start("demo-api", {"summary": "disk almost full"}, key="ticket-1")
    run = api.wait(started.run_id, timeout=30, poll=0.2)

    assert started.created and again.duplicate and again.run_id == started.run_id
    assert (run.status, run.workflow_name, run.workflow_version) == ("COMPLETED", "demo-api", 1)
    assert run.raw["input"]["event"] == {"summary": "disk almost full"}
    assert run.raw["input"]["meta"] == {"workflow": "demo-api"}


def test_refusals_raise_api_error_with_the_code(live):
    _, api = live
    finished = api.wait(api.start("demo-api", key="ticket-2").run_id, timeout=30, poll=0.2)

    with pytest.raises(client.ApiError) as not_allowed:
        api.start("chatops", key="ticket-3")
    with pytest.raises(client.ApiError) as reused:
        api.start("demo-api", {"other": True}, key="ticket-2")
    with pytest.raises(client.ApiError) as cancel_finished:
        api.cancel(finished.run_id, "too late")

    assert (not_allowed.value.status, not_allowed.value.code) == (422, "E-WORKFLOW-001")
    assert (reused.value.status, reused.value.code) == (422, "E-IDEMPOTENT-002")
    assert (cancel_finished.value.status, cancel_finished.value.code) == (409, "E-OPERATION-001")


def test_the_command_starts_an_allowed_workflow_and_waits_for_it(live, engine, project):
    base, _ = live
    with engine.connect() as conn:
        projects.set_allowed_workflows(conn, project["project_id"], ["noop-3"], [])
    env = {
        **os.environ,
        "AWOOOP_API_URL": base,
        "AWOOOP_API_TOKEN": project["api_token"],
    }

    done = subprocess.run(
        [str(BIN / "awooop"), "runs", "start", project["project_id"], "noop-3",
         "--input", '{"n": 1}', "--key", "cli-1", "--wait", "--timeout", "30", "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["created"], answer["run"]["status"]) == (True, "COMPLETED")
    assert answer["run"]["input"]["event"] == {"n": 1}


def test_the_python_example_of_the_docs_runs(live, engine, project):
    # Given the project the example names (here the test's) allowing the workflow it starts
    base, _ = live
    page = (ROOT / "docs" / "client.md").read_text()
    example = re.search(r"^```python\n(.*?)^```", page, re.S | re.M).group(1)
    example = example.replace('"ops"', repr(project["project_id"]))
    with engine.connect() as conn:
        projects.set_allowed_workflows(conn, project["project_id"], ["noop-3"], [])
    env = {**os.environ, "AWOOOP_API_URL": base, "AWOOOP_API_TOKEN": project["api_token"]}

    done = subprocess.run(
        [str(BIN / "python"), "-c", example],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(" PENDING new")
    assert lines[1].startswith("COMPLETED noop-3 1 ")
    assert lines[2].startswith("422 E-WORKFLOW-001 ")
