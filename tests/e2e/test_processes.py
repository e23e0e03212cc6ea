"""End to end with real processes: gunicorn, Celery workers and beat, PostgreSQL, Redis."""

from __future__ import annotations

import threading
import time

import pytest
import requests as http

from awooop.tasks import runs as run_tasks
from tests.support import db
from tests.support import requests as channel_requests
from tests.support import runs as test_runs
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow


def status_of(engine, run_id) -> str:
    return db.run(engine, run_id)["status"]


def wait_for_status(engine, run_id, status: str, timeout: float = 30) -> dict:
    wait_until(lambda: status_of(engine, run_id) == status, timeout, f"run {run_id} to be {status}")
    return db.run(engine, run_id)


def test_one_event_per_channel_runs_to_completion(stack, engine, project):
    stack.worker()
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    _, base = stack.web()

    run_ids = {}
    for channel in ("telegram", "alertmanager", "gitea", "line", "api"):
        path, headers, body = channel_requests.valid(channel, project)
        response = http.post(base + path, headers=headers, data=body, timeout=10)
        assert response.status_code == 202, response.text
        payload = response.json()
        run_ids[channel] = payload["runs"][0]["run_id"] if channel == "line" else payload["run_id"]

    for channel, run_id in run_ids.items():
        run = wait_for_status(engine, run_id, "COMPLETED")
        assert run["output"]["reply"].startswith("[awooop]"), channel
        assert run["workflow_name"] == f"demo-{channel}"
        response = http.get(
            f"{base}/v1/projects/{project['project_id']}/runs/{run_id}",
            headers={"Authorization": f"Bearer {project['api_token']}"},
            timeout=10,
        )
        assert response.json()["status"] == "COMPLETED"
        assert len(response.json()["saga_steps"]) == 3


def test_fifty_concurrent_identical_posts_create_exactly_one_run(stack, engine, project):
    _, base = stack.web()
    path, headers, body = channel_requests.telegram(project, update_id=4242)
    start = threading.Barrier(50)
    responses: list[http.Response] = []
    lock = threading.Lock()

    def post() -> None:
        with http.Session() as session:
            start.wait()
            response = session.post(base + path, headers=headers, data=body, timeout=30)
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=post) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert len(responses) == 50
    assert sorted({r.status_code for r in responses}) == [200, 202]
    assert sum(r.status_code == 202 for r in responses) == 1
    assert len({r.json()["run_id"] for r in responses}) == 1
    assert db.count(engine, "awooop_run_state") == 1
    assert db.count(engine, "awooop_channel_event_dedupe") == 1


def test_worker_killed_mid_step_is_reaped_and_another_worker_completes_the_run(
    stack, engine, project, tmp_path
):
    # Given a worker executing a step that blocks on its first attempt
    marker = tmp_path / "step-started"
    run_id = test_runs.admit(engine, project["project_id"], "test-crash", {"marker": str(marker)})
    first = stack.worker("worker-1")
    stack.worker("maintenance", queues="maintenance")
    stack.beat()
    run_tasks.enqueue([run_id])
    wait_until(marker.exists, 30, "the step to start")

    # When the worker process is SIGKILLed mid-step
    first.kill()
    killed_at_lease = db.run(engine, run_id)["lease_until"]
    assert status_of(engine, run_id) == "RUNNING"

    # Then the reaper returns the run to PENDING within one reaper interval of expiry...
    reaped = wait_until(
        lambda: [e for e in db.events(engine, run_id) if e["trigger"] == "reaper"],
        30,
        "the reaper to reclaim the run",
    )
    reaper_interval = float(stack.env["AWOOOP_REAPER_INTERVAL_SECONDS"])
    late_by = (reaped[0]["at"] - killed_at_lease).total_seconds()
    assert 0 <= late_by <= reaper_interval + 1.0, late_by  # +1 s for beat/queue scheduling
    assert reaped[0]["to_status"] == "PENDING"

    # ...and another worker completes it on its second attempt, with the same effect id.
    stack.worker("worker-2")
    run = wait_for_status(engine, run_id, "COMPLETED")
    assert run["attempt_count"] == 2
    block = [e for e in run["saga_steps"] if e["step"] == "block"]
    # One recorded outcome, from the second claim; a crash is not a retry of the step.
    assert len(block) == 1 and (block[0]["claim"], block[0]["attempt"]) == (2, 1)
    assert marker.read_text().startswith(block[0]["effect_id"] + ":")
    assert [e["step"] for e in run["saga_steps"]] == ["before", "block", "after"]
    history = [
        (e["trigger"], e["to_status"])
        for e in db.events(engine, run_id)
        if e["kind"] in ("transition", "lease")
    ]
    assert history == [
        ("event", "PENDING"),
        ("worker", "RUNNING"),
        ("reaper", "PENDING"),
        ("worker", "RUNNING"),
        ("worker", "COMPLETED"),
    ]


def test_run_whose_message_was_lost_is_executed_via_the_orphan_sweep(stack, engine, project):
    # A run committed without its Celery message (the send after commit never happened).
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    stack.worker()
    stack.worker("maintenance", queues="maintenance")
    stack.beat()

    started = time.monotonic()
    run = wait_for_status(engine, run_id, "COMPLETED", timeout=30)

    assert run["attempt_count"] == 1
    assert time.monotonic() - started < 30
    assert "orphans_resent" in next(p for p in stack.processes if p.name == "maintenance").log()
