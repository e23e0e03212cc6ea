"""The start-up failover check in the Procfile's real processes, on a real primary with an
asynchronous streaming standby: with ``AWOOOP_DATABASE_FAILOVER_CHECK=refuse`` web, worker
and beat exit with status 2 and one line saying why; with the default (``warn``) a web server
starts and logs the warning once (in gunicorn's master, not once per web process)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.services import Postgres
from tests.conftest import IN_CI
from tests.e2e.test_config_processes import procfile
from tests.support import replication
from tests.support.processes import BIN, ROOT, free_port, wait_until

pytestmark = pytest.mark.slow

DATABASE = "awooop"


@pytest.fixture(scope="module")
def primary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    reason = replication.missing_binaries()
    if reason:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("replication")
    with (
        replication.primary_with_database(root / "primary", DATABASE) as server,
        replication.streaming_standby(root / "standby", server),
    ):
        yield server


def _env(primary: Postgres, settings, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWOOOP_")},
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AWOOOP_DATABASE_URL": primary.url(DATABASE),
        "AWOOOP_BROKER_URL": settings.broker_url,
        "AWOOOP_SECRET_KEY": settings.secret_key,
        "AWOOOP_BEAT_SCHEDULE_FILE": str(tmp_path / "celerybeat-schedule"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        **extra,
    }


@pytest.mark.parametrize("process", ["web", "worker", "beat"])
def test_refuse_stops_the_process_on_a_primary_with_only_an_asynchronous_standby(
    primary, settings, tmp_path, process
):
    done = subprocess.run(
        ["sh", "-c", procfile()[process]],
        cwd=ROOT,
        env=_env(primary, settings, tmp_path, AWOOOP_DATABASE_FAILOVER_CHECK="refuse"),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2, done.stdout + done.stderr
    refusal = [line for line in done.stderr.splitlines() if line.startswith("awooop: ")]
    role = "web" if process == "web" else "worker"  # beat starts through the worker's loader
    assert refusal == [
        f"awooop: {role}: the database could lose committed transactions on failover "
        "(1 standby attached, and synchronous_standby_names is empty: all are asynchronous); "
        "refusing to start (AWOOOP_DATABASE_FAILOVER_CHECK=refuse): configure synchronous "
        "replication (Patroni: synchronous_mode: true; plain PostgreSQL: "
        "synchronous_standby_names and synchronous_commit = on), or set "
        "AWOOOP_DATABASE_FAILOVER_CHECK=off if these standbys are never promoted "
        "(docs/operations.md, High availability)"
    ], done.stderr


def test_a_web_server_starts_and_warns_once(primary, settings, tmp_path):
    port = free_port()
    log = tmp_path / "web.log"
    with log.open("w") as out:
        web = subprocess.Popen(
            ["sh", "-c", procfile()["web"]],
            cwd=ROOT,
            env=_env(primary, settings, tmp_path, AWOOOP_PORT=str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: _answers(port),
            60,
            "the web server to answer",
        )
    finally:
        os.killpg(web.pid, 15)
        web.wait(30)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    checks = [line for line in lines if line.get("logger") == "awooop.failover"]
    assert [(c["level"], c["action"]) for c in checks] == [
        ("warning", "database_failover_at_risk")
    ], checks
    assert "two workers could act on one step" in checks[0]["msg"]


def _answers(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False
