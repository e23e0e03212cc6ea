"""The Python client, `awooop runs` and `awooop workers` against a live web (gunicorn) and a
Celery worker."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from typing import Any

import pytest

from awooop import client
from awooop.store import projects
from tests.support.processes import BIN, ROOT, awooop_command, wait_until

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


def awooop_cli(base: str, project: dict, *argv: str) -> subprocess.CompletedProcess[str]:
    """`awooop ARGV` with the project's operator token."""
    return awooop_command(base, project["api_token"], *argv)


def answer(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_operator_lists_shows_pauses_resumes_and_cancels_a_run_from_the_command_line(
    live, engine, project
):
    # Given a run waiting for a signal (it did step "a", which it compensates when cancelled)
    base, api = live
    pid = project["project_id"]
    with engine.connect() as conn:
        projects.set_allowed_workflows(conn, pid, ["test-signal-wait"], [])
    run_id = api.start("test-signal-wait", key="op-cli-1").run_id

    def waits_for_its_signal() -> bool:
        run = api.get(run_id)
        return (run.status, run.current_step) == ("PENDING", "wait")

    wait_until(waits_for_its_signal, 30, "the run waits for its signal")

    # When the operator lists the project's runs, for people and for scripts
    table = awooop_cli(base, project, "runs", "list", pid, "--workflow", "test-signal-wait")
    listed = answer(awooop_cli(base, project, "runs", "list", pid, "--status", "PENDING", "--json"))

    # Then the run is in both, at its step
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["RUN", "ID", "STATUS", "SAGA", "WORKFLOW", "STEP", "AGE"]
    assert row.split()[:6] == [run_id, "PENDING", "RUNNING", "test-signal-wait", "v1", "wait"]
    assert [(r["run_id"], r["current_step"]) for r in listed["runs"]] == [(run_id, "wait")]

    # When they show it, with its history
    shown = awooop_cli(base, project, "runs", "show", pid, run_id, "--events")
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id} PENDING (saga RUNNING) test-signal-wait v1 at step wait" in shown.stdout
    assert re.search(r"^  \S+ \S+ UTC +forward +a +SUCCEEDED +attempt 1", shown.stdout, re.M)
    assert "events (" in shown.stdout

    # When they pause it (the command makes the operation id), then retry with that id
    paused = awooop_cli(base, project, "runs", "pause", pid, run_id, "--reason", "deploying")
    assert paused.returncode == 0, paused.stderr
    operation_id = re.fullmatch(r"operation id (\S+) \(to retry: .*\)\n", paused.stderr).group(1)
    again = awooop_cli(
        base, project, "runs", "pause", pid, run_id, "--reason", "deploying",
        "--operation-id", operation_id,
    )  # fmt: skip

    # Then the first pauses it and the retry is a replay that changes nothing
    assert "pause done: " in paused.stdout and "PAUSED" in paused.stdout
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("pause already done by this operation id (replayed)")
    assert api.get(run_id).raw["control_state"] == "PAUSED"

    # When they resume it at the version they saw, and then at a stale version
    version = answer(awooop_cli(base, project, "runs", "get", pid, run_id, "--json"))["version"]
    resumed = answer(
        awooop_cli(
            base,
            project,
            "runs",
            "resume",
            pid,
            run_id,
            "--reason",
            "deployed",
            "--if-version",
            str(version),
            "--json",
        )  # fmt: skip
    )
    stale = awooop_cli(
        base, project, "runs", "cancel", pid, run_id, "--reason", "x",
        "--if-version", str(version),
    )  # fmt: skip

    # Then the resume is applied and the stale cancel refused, changing nothing
    assert (resumed["applied"], resumed["control_state"]) == (True, "ACTIVE")
    assert stale.returncode == 1 and "E-OPERATION-002 (HTTP 412)" in stale.stderr

    # When they cancel it
    cancelled = answer(
        awooop_cli(base, project, "runs", "cancel", pid, run_id, "--reason", "not needed", "--json")
    )
    finished = api.wait(run_id, timeout=30, poll=0.2)

    # Then it compensates and ends CANCELLED, and its history names each operation and reason
    assert cancelled["applied"] is True
    assert (finished.status, finished.saga_status) == ("CANCELLED", "COMPENSATED")
    history = answer(awooop_cli(base, project, "runs", "show", pid, run_id, "--events", "--json"))
    operations = [
        (e["detail"]["operation"], e["detail"]["reason"])
        for e in history["events"]
        if e["trigger"] == "operator"
    ]
    assert operations == [("pause", "deploying"), ("resume", "deployed"), ("cancel", "not needed")]


def test_the_workers_command_shows_the_worker_holding_a_run_of_the_project(
    live, engine, project, tmp_path
):
    # Given a run whose step sleeps under the stack's worker
    base, api = live
    pid = project["project_id"]
    log = tmp_path / "slow.log"
    with engine.connect() as conn:
        projects.set_allowed_workflows(conn, pid, ["test-slow"], [])
    run_id = api.start("test-slow", {"log": str(log), "seconds": 6}, key="slow-1").run_id
    wait_until(lambda: log.exists() and log.read_text().strip(), 30, "the step is running")
    holder = api.get(run_id).raw["worker_id"]

    # When the operator lists the workers, for scripts and for people
    found = answer(awooop_cli(base, project, "workers", pid, "--json"))["workers"]
    table = awooop_cli(base, project, "workers", pid)

    # Then the worker holding the run is there, beating, with the run counted
    (worker,) = [w for w in found if w["worker_id"] == holder]
    assert (worker["host"], worker["runs_held"], worker["judged_dead_at"]) == (
        socket.gethostname()[:64], 1, None,
    )  # fmt: skip
    assert worker["seen_seconds_ago"] < 30
    assert table.returncode == 0, table.stderr
    assert any(line.split()[0] == holder for line in table.stdout.splitlines()[1:])
    assert api.wait(run_id, timeout=30, poll=0.2).status == "COMPLETED"
