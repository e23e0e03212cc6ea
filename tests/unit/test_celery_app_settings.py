"""The Celery app reads settings only when a command needs them: importing it reads none, a
command that only talks to the broker needs only its URL, and a worker or beat refuses to start
without the rest, naming the variable, before it connects anywhere.

Each case is a real ``celery`` command in a subprocess with a controlled environment.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import BIN, ROOT

# Nothing listens on port 1: a command that tried the broker would hang or fail on it.
UNREACHABLE_BROKER = "redis://127.0.0.1:1/0"


def run(argv: list[str], **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")}
    env.update(settings, AWOOOP_STATE_DIR=str(ROOT / ".awooop-none"))
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def celery(*argv: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return run([str(BIN / "celery"), "-A", "awooop.tasks.app", *argv], **settings)


def test_importing_the_app_and_its_tasks_reads_no_setting():
    result = run(
        [sys.executable, "-c", "import awooop.tasks.app, awooop.tasks.runs, awooop.tasks.sweeps"]
    )

    assert result.returncode == 0, result.stderr


def test_celery_help_asks_for_nothing():
    result = celery("--help")

    assert result.returncode == 0, result.stderr
    assert "AWOOOP_" not in result.stdout + result.stderr


def test_a_command_that_reads_the_configuration_needs_only_the_broker_url():
    # `celery report` loads the whole Celery configuration (celeryconfig) and prints it.
    result = celery("report", AWOOOP_BROKER_URL=UNREACHABLE_BROKER)

    assert result.returncode == 0, result.stderr
    assert "task_acks_late: True" in result.stdout
    assert "AWOOOP_DATABASE_URL" not in result.stdout + result.stderr


def test_a_command_that_needs_the_broker_names_its_missing_url():
    result = celery("report")

    assert result.returncode != 0
    assert "AWOOOP_BROKER_URL is not set" in result.stderr


@pytest.mark.parametrize("program", ["worker", "beat"])
def test_worker_and_beat_refuse_to_start_without_the_database_url(program):
    result = celery(program, AWOOOP_BROKER_URL=UNREACHABLE_BROKER)

    assert (
        result.returncode == 2
    )  # one line naming the variable, as every process (awooop.bootstrap.settings_or_exit)
    assert "awooop: configuration error: AWOOOP_DATABASE_URL and" in result.stderr
    assert "are not set" in result.stderr
    assert "Traceback" not in result.stderr


SHORT_LEASE_MODULE = """
from awooop.domain.workflow import Step, Workflow
from awooop.workflows.registry import register

register(Workflow("short-lease", 1, [Step("one", lambda ctx: None)], lease_ttl_seconds=60))
"""


def test_a_worker_refuses_a_workflow_lease_shorter_than_three_renewals(tmp_path):
    (tmp_path / "short_lease.py").write_text(SHORT_LEASE_MODULE)

    result = celery(
        "worker",
        AWOOOP_BROKER_URL=UNREACHABLE_BROKER,
        AWOOOP_DATABASE_URL="postgresql+psycopg2://nobody@127.0.0.1:1/none",
        AWOOOP_SECRET_KEY="wfrdj3IrHwxgqVj8Zlq1sS0WhKjVZwXG4m3t8RgvJqM=",
        AWOOOP_HEARTBEAT_INTERVAL_SECONDS="30",
        AWOOOP_WORKFLOW_MODULES="short_lease",
        PYTHONPATH=str(tmp_path),
    )

    assert result.returncode == 2
    assert (
        "awooop: configuration error: workflow short-lease v1: lease_ttl_seconds=60"
        in result.stderr
    )
    assert "Traceback" not in result.stderr
