"""The saga engine with real worker, beat and maintenance processes and SIGKILLed workers."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from awooop.tasks import runs as run_tasks
from tests.support import db
from tests.support import runs as test_runs
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow


def wait_for_status(engine, run_id, status: str, timeout: float = 40) -> dict:
    wait_until(
        lambda: db.run(engine, run_id)["status"] == status, timeout, f"run {run_id} to be {status}"
    )
    return db.run(engine, run_id)


def start_sweepers(stack) -> None:
    stack.worker("maintenance", queues="maintenance")
    stack.beat()


def test_compensation_interrupted_by_a_crash_finishes_once_per_step(
    stack, engine, project, tmp_path
):
    # Given a saga compensating [b, a] whose compensation of b blocks on first execution
    marker, log = tmp_path / "undo-b-started", tmp_path / "effects.log"
    run_id = test_runs.admit(
        engine,
        project["project_id"],
        "test-crash-compensation",
        {"marker": str(marker), "log": str(log)},
    )
    first = stack.worker("worker-1")
    start_sweepers(stack)
    run_tasks.enqueue([run_id])
    wait_until(marker.exists, 30, "the compensation of b to start")

    # When the worker is SIGKILLed in the middle of compensating
    first.kill()
    stack.worker("worker-2")

    # Then another worker finishes the compensation, in reverse order, once per step
    run = wait_for_status(engine, run_id, "FAILED")
    assert (run["saga_status"], run["failure_code"]) == ("COMPENSATED", "E-STEP-001")
    undone = [(e["step"], e["status"]) for e in run["saga_steps"] if e["phase"] == "compensate"]
    assert undone == [("b", "SUCCEEDED"), ("a", "SUCCEEDED")]
    effects = [line.split()[0] for line in log.read_text().splitlines()]
    # undo:b ran twice (the crash), with the same effect id; undo:a once.
    assert effects == ["do:a", "do:b", "do:c", "undo:b", "undo:b", "undo:a"]
    undo_b_ids = {
        line.split()[1] for line in log.read_text().splitlines() if line.startswith("undo:b")
    }
    assert undo_b_ids == {f"{run_id}:b:compensate"}


class _KeyRecorder(http.server.BaseHTTPRequestHandler):
    keys: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.keys.append(self.headers["Idempotency-Key"])
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP endpoint recording the Idempotency-Key of every call."""
    recorder = type("Recorder", (_KeyRecorder,), {"keys": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/act", recorder.keys
    server.shutdown()
    server.server_close()


def test_step_killed_after_its_side_effect_is_retried_with_the_same_effect_id(
    stack, engine, project, tmp_path, endpoint
):
    url, keys = endpoint
    marker = tmp_path / "called"
    run_id = test_runs.admit(
        engine, project["project_id"], "test-effect", {"url": url, "marker": str(marker)}
    )
    first = stack.worker("worker-1")
    start_sweepers(stack)
    run_tasks.enqueue([run_id])
    wait_until(marker.exists, 30, "the side effect")

    first.kill()
    stack.worker("worker-2")
    run = wait_for_status(engine, run_id, "COMPLETED")

    assert len(keys) == 2  # the call was made twice (at-least-once)...
    assert set(keys) == {f"{run_id}:call:forward"}  # ...with one idempotency key
    assert run["attempt_count"] == 2


def test_retry_is_woken_by_the_timer_sweep_not_by_a_celery_eta(stack, engine, project):
    run_id = test_runs.admit(engine, project["project_id"], "test-flaky", {"fail_times": 2})
    stack.worker()
    start_sweepers(stack)
    run_tasks.enqueue([run_id])

    run = wait_for_status(engine, run_id, "COMPLETED")

    flaky = [(e["attempt"], e["status"]) for e in run["saga_steps"] if e["step"] == "flaky"]
    assert flaky == [(1, "FAILED"), (2, "FAILED"), (3, "SUCCEEDED")]
    maintenance = next(p for p in stack.processes if p.name == "maintenance").log()
    assert "timers_fired" in maintenance
    with engine.connect() as conn:
        from sqlalchemy import text

        fired = conn.execute(
            text("SELECT count(*) FROM awooop_timer WHERE state = 'FIRED' AND run_id = :r"),
            {"r": run_id},
        ).scalar_one()
    assert fired == 2
