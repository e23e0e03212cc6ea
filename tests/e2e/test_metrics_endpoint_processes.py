"""Each worker and beat serves its own metrics (``AWOOOP_METRICS_PORT``), as on a host of its
own: real Celery workers and beat, each with a metrics directory of its own, scraped on their
own ports — never through a web server. And on one host, the web's ``/metrics`` sums what a
real worker and web servers counted of runs, failures, approvals, outbound sends and requests,
each under its bounded labels."""

from __future__ import annotations

import os
import platform
import signal
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests as http

import awooop
from awooop.tasks import runs as run_tasks
from awooop.tasks import sweeps as sweep_tasks
from tests.e2e import test_approval_processes as approval_flow
from tests.support import approvals as approvals_setup
from tests.support import db, metrics
from tests.support import runs as test_runs
from tests.support.fake_provider import FakeProvider
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.slow


def own_endpoint(tmp_path: Path, name: str) -> tuple[dict[str, str], str]:
    """The environment of a process serving its own directory on a free port, and its URL."""
    port = free_port()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / f"{name}-metrics"),
        "AWOOOP_METRICS_PORT": str(port),
    }
    return env, f"http://127.0.0.1:{port}/metrics"


def scrape(url: str) -> str:
    return http.get(url, timeout=10).text


def completed_segments(url: str) -> float | None:
    return metrics.sample(scrape(url), "awooop_run_segments_total", outcome="completed")


def run_to_completion(engine, project) -> str:
    run_id = test_runs.admit(engine, project["project_id"])
    run_tasks.enqueue([run_id])
    wait_until(lambda: db.run(engine, run_id)["status"] == "COMPLETED", 30, "the run to complete")
    return str(run_id)


def pool_pid(engine, run_id: str) -> int:
    """The pid of the pool process that ran the run (its worker id is host:pid:nonce)."""
    return int(db.run(engine, run_id)["worker_id"].split(":")[1])


def test_a_worker_serves_the_counters_of_its_pool_processes_live_and_dead_on_its_own_port(
    stack, engine, project, tmp_path
):
    # Given a web server and a worker with a metrics directory each, the worker serving its own
    stack.env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "web-metrics")
    _, base = stack.web()
    env, url = own_endpoint(tmp_path, "worker")
    stack.worker(env=env)

    # When its pool process completes a run, is counted and is SIGKILLed, and the pool
    # process that replaces it completes another
    first = run_to_completion(engine, project)
    # (the segment is counted just after the run's last commit: wait for it before the kill)
    wait_until(lambda: completed_segments(url) == 1, 20, "the first run on the endpoint")
    os.kill(pool_pid(engine, first), signal.SIGKILL)
    second = run_to_completion(engine, project)
    assert pool_pid(engine, second) != pool_pid(engine, first)

    # Then the worker's endpoint counts both runs, the dead process's included
    wait_until(lambda: completed_segments(url) == 2, 20, "both runs on the worker's endpoint")
    text = scrape(url)
    assert metrics.sample(text, "awooop_claim_latency_seconds_count") == 2
    assert metrics.sample(text, "awooop_lease_losses_total", detected_by="write") == 0
    # (finished runs are counted where they finish: by the worker)
    assert metrics.sample(text, "awooop_runs_finished_total", status="COMPLETED") == 2
    # ...and the web's /metrics serves the database's view, none of the worker's counters
    web_text = http.get(base + "/metrics", timeout=10).text
    assert metrics.sample(web_text, "awooop_runs", status="PENDING") == 0
    assert metrics.sample(web_text, "awooop_runs_finished_total", status="COMPLETED") in (None, 0)
    assert metrics.sample(web_text, "awooop_run_segments_total", outcome="completed") is None
    assert metrics.sample(web_text, "awooop_claim_latency_seconds_count") == 0


def test_a_restarted_worker_empties_its_directory_and_counts_from_zero(
    stack, engine, project, tmp_path
):
    env, url = own_endpoint(tmp_path, "worker")
    worker = stack.worker(env=env)
    run_to_completion(engine, project)
    wait_until(lambda: completed_segments(url) == 1, 20, "the run on the worker's endpoint")
    worker.stop()
    old_files = {p.name for p in Path(env["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db")}

    restarted = stack.worker("restarted", env=env)  # same directory, same port

    text = scrape(url)
    assert metrics.sample(text, "awooop_run_segments_total", outcome="completed") is None
    # the known series exist from the start, at zero
    assert metrics.sample(text, "awooop_reaper_recoveries_total", outcome="requeued") == 0
    new_files = {p.name for p in Path(env["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db")}
    assert old_files and not (old_files & new_files)
    assert all(name.endswith(f"_{restarted.popen.pid}.db") for name in new_files)


def test_a_second_process_cannot_serve_a_directory_in_use(stack, tmp_path):
    env, _ = own_endpoint(tmp_path, "worker")
    stack.worker(env=env)

    intruder = stack.worker(
        "intruder", env={**env, "AWOOOP_METRICS_PORT": str(free_port())}, ready=False
    )

    wait_until(lambda: intruder.popen.poll() is not None, 30, "the second worker to exit")
    assert intruder.popen.returncode != 0
    assert "needs a directory of its own" in intruder.log()


def test_a_worker_whose_metrics_port_is_taken_refuses_to_start(stack, tmp_path):
    env, _ = own_endpoint(tmp_path, "worker")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(env["AWOOOP_METRICS_PORT"])))
        taken.listen()

        worker = stack.worker(env=env, ready=False)

        wait_until(lambda: worker.popen.poll() is not None, 30, "the worker to exit")
    assert worker.popen.returncode != 0
    assert f"AWOOOP_METRICS_PORT={env['AWOOOP_METRICS_PORT']}: cannot listen there" in worker.log()


def test_beat_and_the_maintenance_worker_count_sends_and_sweep_passes_on_their_own_ports(
    stack, tmp_path
):
    # Given a sweep message that expired before a worker could take it
    sweep_tasks.fire_due_timers.apply_async(
        queue="maintenance", expires=datetime.now(UTC) - timedelta(seconds=1)
    )
    maintenance_env, maintenance_url = own_endpoint(tmp_path, "maintenance")
    beat_env, beat_url = own_endpoint(tmp_path, "beat")

    # When the maintenance worker and beat run, each serving its own metrics
    stack.worker("maintenance", queues="maintenance", env=maintenance_env)
    stack.beat(env=beat_env)

    # Then beat counts what it sent, the maintenance worker each pass and the expired one
    def sent() -> float:
        text = scrape(beat_url)
        task = "awooop.sweeps.fire_due_timers"
        return metrics.sample(text, "awooop_beat_sent_total", task=task) or 0

    def passes(outcome: str) -> float:
        text = scrape(maintenance_url)
        sweep = {"sweep": "fire_due_timers", "outcome": outcome}
        return metrics.sample(text, "awooop_sweep_passes_total", **sweep) or 0

    wait_until(lambda: sent() >= 3, 30, "beat to count three timer sweeps sent")
    wait_until(lambda: passes("succeeded") >= 3, 30, "three timer sweep passes")
    assert passes("expired") == 1
    assert passes("failed") == 0
    assert "awooop_sweep_passes_total{" not in scrape(beat_url)
    assert "awooop_beat_sent_total{" not in scrape(maintenance_url)


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    yield fake
    fake.close()


def test_one_hosts_metrics_count_runs_failures_approvals_sends_and_requests_by_bounded_labels(
    stack, engine, project, settings, tmp_path, provider
):
    # Given a web server and a worker on one host, sharing a metrics directory, and a project
    # whose API events start an approval workflow that prompts through a webhook
    stack.env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    approvals_setup.configure(
        engine, settings, project["project_id"], config={"notify_url": f"{provider.url}/hook"}
    )
    stack.worker("worker", queues="runs,notifications")
    _, base = stack.web()

    # When one run is approved and completes, and another fails (a step rejects)
    approved = approval_flow.admit(base, project)
    token = approval_flow.prompt_token(provider, approved)
    assert approval_flow.decide(base, project, token).status_code == 200
    approval_flow.wait_for(engine, approved, "COMPLETED")
    failed = test_runs.admit(engine, project["project_id"], "test-saga")
    run_tasks.enqueue([failed])
    assert approval_flow.wait_for(engine, failed, "FAILED")["failure_code"] == "E-STEP-001"

    # Then the web's /metrics counts each, under its workflow, status and failure code
    def scrape_web() -> str:
        return scrape(base + "/metrics")

    def ended(workflow: str, status: str) -> float | None:
        labels = {"workflow": workflow, "status": status}
        return metrics.sample(scrape_web(), "awooop_run_duration_seconds_count", **labels)

    # (counted just after each run's last commit)
    wait_until(lambda: ended("test-saga", "FAILED") == 1, 20, "the failed run on /metrics")
    wait_until(lambda: ended("test-approval", "COMPLETED") == 1, 20, "the approved run")
    # every message the provider received was counted as sent, once it was marked so
    hooks = lambda: len(provider.to("/hook"))  # noqa: E731
    wait_until(lambda: hooks() >= 2, 20, "the prompt and the outcome message")

    def sends(result: str) -> float | None:
        labels = {"channel": "webhook", "result": result}
        return metrics.sample(scrape_web(), "awooop_outbound_sends_total", **labels)

    wait_until(lambda: sends("sent") == hooks(), 20, "every webhook call counted as sent")
    text = scrape_web()
    assert metrics.sample(text, "awooop_run_duration_seconds_count", **{
        "workflow": "test-approval", "status": "FAILED"
    }) is None  # fmt: skip
    assert (
        metrics.sample(
            text, "awooop_run_failures_total", workflow="test-saga", failure_code="E-STEP-001"
        )
        == 1
    )
    assert (
        metrics.sample(
            text, "awooop_run_failures_total", workflow="test-approval", failure_code="E-STEP-001"
        )
        is None
    )
    # (admission to the end: at least the time the approval waited)
    approval_wait = metrics.sample(text, "awooop_approval_wait_seconds_sum", decision="approved")
    duration = metrics.sample(
        text, "awooop_run_duration_seconds_sum", workflow="test-approval", status="COMPLETED"
    )
    assert approval_wait is not None and duration is not None
    assert 0 < approval_wait <= duration < 120
    assert metrics.sample(text, "awooop_approval_wait_seconds_count", decision="approved") == 1
    assert metrics.sample(text, "awooop_approval_wait_seconds_count", decision="rejected") is None
    assert sends("retry") == 0 and sends("parked") == 0
    # requests by route template and status class, never a path with an id or a token in it
    decision_route = "/v1/projects/<project_id>/approvals/<token>"
    assert (
        metrics.sample(
            text, "awooop_http_request_duration_seconds_count", route=decision_route, status="2xx"
        )
        == 1
    )
    assert (
        metrics.sample(
            text,
            "awooop_http_request_duration_seconds_count",
            route="/v1/projects/<project_id>/runs",
            status="2xx",
        )
        == 1
    )
    routes = {
        dict(labels).get("route")
        for (name, labels) in metrics.parse(text)
        if name.startswith("awooop_http_request_duration_seconds")
    }
    assert not [r for r in routes if project["project_id"] in r or token in r]
    build = {
        dict(labels)["version"]: value
        for (name, labels), value in metrics.parse(text).items()
        if name == "awooop_build_info"
    }
    assert build == {awooop.__version__: 1.0}
    assert (
        metrics.sample(
            text, "awooop_build_info", version=awooop.__version__, python=platform.python_version()
        )
        == 1
    )
