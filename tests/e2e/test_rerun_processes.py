"""Finding and rerunning runs with the `awooop` command against a live web (gunicorn), a
Celery worker and beat: a workflow tags its runs, the command finds them by tag and reruns
them — one, then every failed one at a bounded rate — to completion."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from awooop import client
from awooop.store import projects
from tests.support import tokens
from tests.support.processes import awooop_command

pytestmark = pytest.mark.slow


def test_a_tagged_failed_run_is_found_and_rerun_to_completion(stack, engine, project, tmp_path):
    # Given a worker (and the maintenance sweeps) and a workflow that tags its runs and is
    # rejected while a file says the service is broken
    stack.worker(queues="runs,maintenance")
    stack.beat()
    _, base = stack.web()
    pid = project["project_id"]
    with engine.connect() as conn:
        projects.set_allowed_workflows(conn, pid, ["test-tags"], [])
    operator = tokens.add(engine, pid, "operator")
    admin = tokens.add(engine, pid, "admin")
    api = client.Client(base, operator, pid)
    broken = tmp_path / "broken"
    broken.write_text("yes")
    failed = []
    for host in ("h1", "h2", "h3"):
        event = {"tags": {"service": "db-1", "host": host}, "broken_flag": str(broken)}
        started = api.start("test-tags", event, key=f"alert-{host}")
        failed.append(api.wait(started.run_id, timeout=30, poll=0.2))
    other = api.wait(api.start("test-tags", {"tags": {"service": "db-2"}}, key="x").run_id)
    assert [run.status for run in failed] == ["FAILED"] * 3 and other.status == "COMPLETED"

    # When the operator finds the runs of the broken service's host by their tags
    found = awooop_command(
        base, operator, "runs", "list", pid, "--tag", "service:db-1", "--tag", "host:h1", "--json"
    )
    assert found.returncode == 0, found.stderr
    listed = json.loads(found.stdout)["runs"]
    assert [run["run_id"] for run in listed] == [failed[0].run_id]
    assert listed[0]["tags"] == {"service": "db-1", "host": "h1"}
    by_key = awooop_command(base, operator, "runs", "list", pid, "--idempotency-key", "alert-h2")
    assert failed[1].run_id in by_key.stdout and failed[0].run_id not in by_key.stdout

    # and, the service mended, reruns that one
    broken.unlink()
    reran = awooop_command(
        base, operator, "runs", "rerun", pid, failed[0].run_id, "--key", "fix-1", "--json"
    )
    assert reran.returncode == 0, reran.stderr
    new_id = json.loads(reran.stdout)["run_id"]

    # Then the rerun runs to completion with the original's input, linked both ways
    done = api.wait(new_id, timeout=30, poll=0.2)
    assert done.status == "COMPLETED"
    assert done.raw["input"] == api.get(failed[0].run_id).raw["input"]
    assert done.raw["rerun_of"] == failed[0].run_id
    assert done.raw["tags"] == {"service": "db-1", "host": "h1"}
    shown = awooop_command(base, operator, "runs", "show", pid, failed[0].run_id)
    assert f"reruns (1):\n    {new_id} COMPLETED" in shown.stdout
    again = awooop_command(base, operator, "runs", "rerun", pid, failed[0].run_id, "--key", "fix-1")
    assert again.returncode == 0 and "already rerun with this key" in again.stdout

    # When an admin reruns every other failed run of the service, one a second
    dry = awooop_command(
        base, admin, "runs", "rerun", pid, "--tag", "service:db-1", "--status", "FAILED",
        "--dry-run", "--json",
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert sorted(json.loads(dry.stdout)["run_ids"]) == sorted(r.run_id for r in failed)
    many = awooop_command(
        base, admin, "runs", "rerun", pid, "--tag", "service:db-1", "--status", "FAILED",
        "--rate", "1", "--key", "fix-all", "--json",
    )  # fmt: skip
    assert many.returncode == 0, many.stderr
    made = json.loads(many.stdout)["runs"]

    # Then they start one second apart and all complete (the later ones woken by their timer)
    assert sorted(r["rerun_of"] for r in made) == sorted(r.run_id for r in failed)
    starts = sorted(datetime.fromisoformat(r["available_at"]) for r in made)
    assert [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)] == [1, 1]
    finished = [api.wait(r["run_id"], timeout=60, poll=0.2) for r in made]
    assert [run.status for run in finished] == ["COMPLETED"] * 3
    # the operator's token may rerun one run, not many
    refused = awooop_command(base, operator, "runs", "rerun", pid, "--tag", "service:db-1")
    assert refused.returncode == 1 and "E-AUTH-002" in refused.stderr
