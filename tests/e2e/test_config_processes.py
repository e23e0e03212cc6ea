"""Configuration with real processes: every process of the Procfile refuses an invalid setting
at start with one line naming the variable (no traceback, no password), and a process that
starts says which database and broker it uses without showing their passwords or the key."""

from __future__ import annotations

import os
import subprocess

import pytest
import requests as http
from sqlalchemy.engine import make_url

from tests.support import db
from tests.support import requests as channel_requests
from tests.support.processes import BIN, ROOT, wait_until

pytestmark = pytest.mark.slow

CANARY = "s3cret-canary-pw"


def procfile() -> dict[str, str]:
    """The Procfile's command line of each process."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    entries = (line.partition(":") for line in lines if line and not line.startswith("#"))
    return {name.strip(): command.strip() for name, _, command in entries}


@pytest.mark.parametrize("process", ["web", "worker", "maintenance", "beat", "flower"])
@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        (
            "AWOOOP_DATABASE_URL",
            f"mysql://awooop:{CANARY}@db.example/awooop",
            "AWOOOP_DATABASE_URL=mysql://awooop:***@db.example/awooop: driver 'mysql' is not "
            "supported",
        ),
        (
            "AWOOOP_REAPER_INTERVAL_SECONDS",
            "600",
            "AWOOOP_REAPER_INTERVAL_SECONDS=600 must be less than AWOOOP_LEASE_TTL_SECONDS=300",
        ),
    ],
)
def test_a_process_refuses_an_invalid_setting_with_one_line(
    settings, tmp_path, process, setting, value, says
):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")},
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_BROKER_URL": settings.broker_url,
        "AWOOOP_SECRET_KEY": settings.secret_key,
        "AWOOOP_BEAT_SCHEDULE_FILE": str(tmp_path / "celerybeat-schedule"),
        "FLOWER_BASIC_AUTH": f"admin:{CANARY}",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        setting: value,
    }

    done = subprocess.run(
        ["sh", "-c", procfile()[process]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"awooop: configuration error: {says}")
    assert done.stderr.count("\n") == 1, done.stderr
    assert CANARY not in done.stderr and settings.secret_key not in done.stderr


def test_started_processes_name_their_database_and_broker_without_passwords(stack, engine, project):
    # Given URLs with passwords (the test PostgreSQL trusts; Redis's default user has no
    # password, so any password of it is accepted) and the secret key
    database = make_url(stack.env["AWOOOP_DATABASE_URL"])
    password = database.password or CANARY
    stack.env["AWOOOP_DATABASE_URL"] = database.set(password=password).render_as_string(
        hide_password=False
    )
    broker = make_url(stack.env["AWOOOP_BROKER_URL"])
    broker_password = broker.password or CANARY
    stack.env["AWOOOP_BROKER_URL"] = broker.set(
        username=broker.username or "default", password=broker_password
    ).render_as_string(hide_password=False)
    secrets = (password, broker_password, stack.env["AWOOOP_SECRET_KEY"])

    # When web, worker, maintenance worker and beat start and run an event to completion
    worker = stack.worker()
    maintenance = stack.worker("maintenance", queues="maintenance")
    beat = stack.beat()
    web, base = stack.web()
    path, headers, body = channel_requests.telegram(project, update_id=7)
    response = http.post(base + path, headers=headers, data=body, timeout=10)
    assert response.status_code == 202
    run_id = response.json()["run_id"]
    wait_until(lambda: db.run(engine, run_id)["status"] == "COMPLETED", 30, "the run to complete")

    # Then each says at start which database and broker it uses, masked
    masked_database = database.set(password=password).render_as_string(hide_password=True)
    masked_broker = broker.set(
        username=broker.username or "default", password=broker_password
    ).render_as_string(hide_password=True)
    for process, role in (
        (worker, "worker"),
        (maintenance, "worker"),
        (beat, "beat"),
        (web, "web"),
    ):
        started = [line for line in process.log().splitlines() if '"settings_loaded"' in line]
        assert started, process.log()[-2000:]
        assert f'"role": "{role}"' in started[0]
        assert f'"database_url": "{masked_database}"' in started[0]
        assert f'"broker_url": "{masked_broker}"' in started[0]
    # Celery's banner shows the transport with its own mask
    assert f"redis://{broker.username or 'default'}:**@" in worker.log()
    # And no log line of any process shows a password or the key
    for process in (worker, maintenance, beat, web):
        for secret in secrets:
            assert secret not in process.log(), f"{process.name} logged a secret"
