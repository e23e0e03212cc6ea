"""Celery's and gunicorn's own lines are JSON, one format per stream: a real worker, beat and
gunicorn, each with stdout and stderr kept apart, from start to a SIGTERM stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import requests as http

from awooop.tasks import runs as run_tasks
from tests.support import db
from tests.support import runs as test_runs
from tests.support.processes import BIN, ROOT, free_port, wait_until

pytestmark = pytest.mark.slow


class Streams:
    """A process whose stdout and stderr go to files of their own."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], directory: Path) -> None:
        self.name = name
        self.out_path = directory / f"{name}.stdout"
        self.err_path = directory / f"{name}.stderr"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True
            )

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 30) -> None:
        def found() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.stderr()[-3000:]}")
            return needle in self.stderr()

        wait_until(found, timeout, f"{needle!r} in {self.name}'s stderr")

    def terminate(self) -> int:
        """SIGTERM, as a process manager stops it; its exit status."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            raise

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)


@pytest.fixture
def started(stack):
    """Starts Streams processes with the test stack's environment; kills what is left."""
    processes: list[Streams] = []

    def start(name: str, argv: list[str]) -> Streams:
        process = Streams(name, argv, dict(stack.env), stack.log_dir)
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.kill()
        print(f"--- {process.name} stderr ---\n{process.stderr()[-3000:]}")
        print(f"--- {process.name} stdout ---\n{process.stdout()[-3000:]}")


def parsed(text: str) -> list[dict]:
    """Each line as JSON; a line that is not fails the test with the line."""
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}")
    return lines


def celery(*argv: str, loglevel: str = "INFO") -> list[str]:
    return [str(BIN / "celery"), "-A", "awooop.tasks.app", "--quiet", *argv, "--loglevel", loglevel]


def test_a_celery_worker_writes_only_json_lines_from_start_to_a_sigterm_stop(
    started, engine, project
):
    worker = started("worker", celery("worker", "-Q", "runs", "-n", f"json-{os.getpid()}@%h"))
    worker.wait_for("ready.")

    ok = test_runs.admit(engine, project["project_id"])
    broken = test_runs.admit(engine, project["project_id"], "test-fail")
    run_tasks.enqueue([ok, broken])
    wait_until(
        lambda: [db.run(engine, r)["status"] for r in (ok, broken)] == ["COMPLETED", "FAILED"],
        30,
        "both runs to finish",
    )
    assert worker.terminate() == 0

    lines = parsed(worker.stderr())
    assert parsed(worker.stdout()) == []
    loggers = {line["logger"] for line in lines}
    # Celery's own lines, its task trace and awooop's, all as JSON on stderr
    assert {"celery.apps.worker", "celery.app.trace", "awooop.engine.runner"} <= loggers
    assert any(line["msg"].endswith("ready.") for line in lines)
    assert any(line.get("action") == "worker_shutting_down" for line in lines)
    assert all({"ts", "level", "logger", "msg"} <= line.keys() for line in lines)


def test_celery_beat_writes_only_json_lines_from_start_to_a_sigterm_stop(started, stack):
    # At DEBUG: beat's line for each sweep it sends is a DEBUG line (awooop.logs).
    beat = started("beat", celery("beat", "-s", str(stack.log_dir / "schedule"), loglevel="DEBUG"))
    beat.wait_for("Sending due task fire-due-timers")

    beat.terminate()

    lines = parsed(beat.stderr())
    assert parsed(beat.stdout()) == []
    assert any(line["msg"].startswith("beat: Starting") for line in lines)
    assert {line["logger"] for line in lines} >= {"celery.beat"}


def test_gunicorn_writes_its_error_log_to_stderr_and_its_access_log_to_stdout_as_json(
    started, stack, project
):
    port = free_port()
    stack.env.update({"AWOOOP_PORT": str(port), "AWOOOP_ACCESS_LOG": "1"})
    web = started(
        "web", [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "awooop.web.app:create_app()"]
    )
    web.wait_for("Booting worker")
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(base), 20, "gunicorn to answer")
    pid = project["project_id"]
    token = "approval-token-" + "x" * 30

    assert http.get(f"{base}/nowhere", timeout=10).status_code == 404
    unauthenticated = http.post(
        f"{base}/v1/projects/{pid}/runs",
        headers={"Authorization": "Bearer wrong", "Idempotency-Key": "k"},
        json={"summary": "x"},
        timeout=10,
    )
    assert unauthenticated.status_code == 401
    assert http.post(f"{base}/v1/projects/{pid}/approvals/{token}", timeout=10).status_code in (
        401,
        404,
    )
    assert web.terminate() == 0

    errors, access = parsed(web.stderr()), parsed(web.stdout())
    assert any(line["msg"].startswith("Booting worker") for line in errors)
    assert {line["logger"] for line in errors} >= {"gunicorn.error"}
    assert {line["logger"] for line in access} == {"gunicorn.access"}
    requests_seen = {(line["method"], line["path"], line["status"]) for line in access}
    assert {
        ("GET", "/nowhere", 404),
        ("POST", f"/v1/projects/{pid}/runs", 401),
    } <= requests_seen
    approvals = [line for line in access if "/approvals/" in line["path"]]
    assert [line["path"] for line in approvals] == [f"/v1/projects/{pid}/approvals/[redacted]"]
    assert token not in web.stdout() + web.stderr()


def _answers(base: str) -> bool:
    try:
        return http.get(base + "/healthz", timeout=5).status_code == 200
    except http.RequestException:  # not listening yet, or its workers still loading the app
        return False
