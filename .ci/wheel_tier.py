"""The wheel tier's checks, run by ``.ci/wheel-tier`` with the interpreter of a clean virtualenv
that has only the AwoooP wheel (no extras) installed, from a directory outside the checkout.

    python wheel_tier.py WORK_DIR WHEEL

Every process it starts gets a process group of its own and is stopped (SIGTERM, then SIGKILL)
however the run ends; the database it creates is dropped and its Redis DB flushed.
Only the standard library and what the wheel installs are used.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import secrets
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import requests
from redis import Redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ADMIN_URL = os.environ.get(
    "AWOOOP_WHEEL_ADMIN_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("AWOOOP_WHEEL_REDIS_URL", "redis://127.0.0.1:6379/14")
BIN = Path(sys.executable).parent
PROJECT = "wheel"

# Files a user of the wheel needs besides the Python modules.
SHIPPED = (
    "celeryconfig.py",
    "awooop/py.typed",
    "awooop/web/gunicorn_conf.py",
    "awooop/migrations/env.py",
    "awooop/migrations/script.py.mako",
    "awooop/migrations/versions/0001_initial.py",
    "awooop/web/static/console.css",
    "awooop/web/templates/console/base.html",
)


def step(message: str) -> None:
    print(f"wheel tier: {message}", flush=True)


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


# --- the package -------------------------------------------------------------------------


def check_wheel_contents(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [name for name in SHIPPED if name not in names]
    assert not missing, f"the wheel lacks {missing}"
    stray = sorted({n.split("/")[0] for n in names} - {"awooop", "celeryconfig.py"})
    assert all(s.endswith(".dist-info") for s in stray), f"unexpected top-level entries {stray}"


def import_every_module() -> int:
    """Import each module of the installed package: a missing dependency fails here."""
    import awooop

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(awooop.__file__).resolve()
    assert where.is_relative_to(site), f"awooop comes from {where}, not the venv's {site}"
    count = 0
    for module in pkgutil.walk_packages(awooop.__path__, "awooop."):
        if module.name.startswith("awooop.migrations"):  # alembic scripts, run by alembic
            continue
        # gunicorn's settings file reads and checks the settings when loaded; the tier starts
        # gunicorn with it below.
        if module.name == "awooop.web.gunicorn_conf":
            continue
        # The pytest plugin (awooop_env) is loaded by pytest only, where pytest is installed.
        if module.name == "awooop.testing.pytest_plugin":
            continue
        importlib.import_module(module.name)
        count += 1
    return count


# --- services ----------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"awooop_wheel_{os.getpid()}_{secrets.token_hex(3)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def own_redis_db() -> Iterator[str]:
    client = Redis.from_url(REDIS_URL)
    client.flushdb()
    try:
        yield REDIS_URL
    finally:
        client.flushdb()
        client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- processes ---------------------------------------------------------------------------


class Processes:
    """The processes this tier started, each the leader of its own process group."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            popen = subprocess.Popen(
                argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append((name, popen))
        step(f"started {name} (pid {popen.pid}): {' '.join(argv[1:3])} ...")
        return popen

    def check_alive(self) -> None:
        for name, popen in self.started:
            if popen.poll() is not None:
                raise AssertionError(f"{name} exited with status {popen.returncode}")

    def stop(self) -> None:
        for name, popen in reversed(self.started):
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGTERM)
                try:
                    popen.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(popen.pid, signal.SIGKILL)
                    popen.wait(timeout=10)
            # Pool children of a worker share its process group; none may outlive it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            step(f"stopped {name} (status {popen.returncode})")

    def print_logs(self) -> None:
        for name, _ in self.started:
            text_ = (self.logs / f"{name}.log").read_text(errors="replace")
            print(f"--- {name} (last 3000 characters) ---\n{text_[-3000:]}", flush=True)


def run(argv: list[str], env: dict[str, str], timeout: float = 120) -> str:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited with {result.returncode}:\n{result.stdout}{result.stderr}"
        )
    return result.stdout


def clean_env(**values: str) -> dict[str, str]:
    """The parent's environment without any AWOOOP_* or Celery setting, plus ``values``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWOOOP_", "CELERY_", "PROMETHEUS_", "FLOWER_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(values)
    return env


# --- the run -----------------------------------------------------------------------------


def main(work: Path, wheel: Path) -> None:
    check_wheel_contents(wheel)
    step(f"imported {import_every_module()} modules of the installed package")
    logs = work / "logs"
    logs.mkdir()
    # SIGTERM (a cancelled CI job) unwinds like Ctrl-C: every process is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with fresh_database() as database_url, own_redis_db() as broker_url:
        port = free_port()
        secret_key = run([str(BIN / "awooop"), "dev", "key"], clean_env()).strip()
        env = clean_env(
            AWOOOP_DATABASE_URL=database_url,
            AWOOOP_BROKER_URL=broker_url,
            AWOOOP_SECRET_KEY=secret_key,
            AWOOOP_PORT=str(port),
            AWOOOP_WEB_WORKERS="1",
            AWOOOP_BEAT_SCHEDULE_FILE=str(work / "celerybeat-schedule"),
            PROMETHEUS_MULTIPROC_DIR=str(work / "metrics"),
        )
        (work / "metrics").mkdir()
        run([str(BIN / "awooop"), "migrate"], env)
        step("awooop migrate: done")
        project = json.loads(run([str(BIN / "awooop"), "project", "create", PROJECT], env))
        step(f"awooop project create {PROJECT}: done")

        processes = Processes(env, logs)
        try:
            processes.start(
                "web",
                [
                    str(BIN / "gunicorn"),
                    "-c",
                    "python:awooop.web.gunicorn_conf",
                    "awooop.web.app:create_app()",
                ],
            )
            processes.start(
                "worker",
                [
                    str(BIN / "celery"),
                    "-A",
                    "awooop.tasks.app",
                    "worker",
                    "-Q",
                    "runs,notifications,maintenance",
                    "-n",
                    f"wheel-{os.getpid()}@%h",
                    "--concurrency",
                    "1",
                    "--loglevel",
                    "INFO",
                ],
            )
            processes.start(
                "beat",
                [str(BIN / "celery"), "-A", "awooop.tasks.app", "beat", "--loglevel", "INFO"],
            )
            admit_and_complete(processes, f"http://127.0.0.1:{port}", project["api_token"])
            ping_without_database(env)
        except BaseException:
            processes.print_logs()
            raise
        finally:
            processes.stop()
    step("passed")


def admit_and_complete(processes: Processes, base: str, token: str) -> None:
    def ready() -> bool:
        processes.check_alive()
        try:
            return requests.get(f"{base}/readyz", timeout=10).status_code == 200
        except requests.RequestException:  # not listening yet, or still booting
            return False

    until(ready, 60, "the web process to be ready")
    auth = {"Authorization": f"Bearer {token}"}
    answer = requests.post(
        f"{base}/v1/projects/{PROJECT}/runs",
        headers={**auth, "Idempotency-Key": f"wheel-{uuid.uuid4()}"},
        json={"summary": "admitted by the wheel tier"},
        timeout=10,
    )
    assert answer.status_code == 202, f"admission answered {answer.status_code}: {answer.text}"
    run_id = answer.json()["run_id"]
    step(f"event admitted: run {run_id}")

    def completed() -> dict[str, Any] | None:
        processes.check_alive()
        run_ = requests.get(f"{base}/v1/projects/{PROJECT}/runs/{run_id}", headers=auth, timeout=5)
        body: dict[str, Any] = run_.json()
        assert body["status"] not in ("FAILED", "CANCELLED"), f"the run ended {body}"
        return body if body["status"] == "COMPLETED" else None

    run_ = until(completed, 90, f"run {run_id} to be COMPLETED")
    step(f"run {run_id} COMPLETED after {run_['attempt_count']} attempt(s)")
    metrics = requests.get(f"{base}/metrics", timeout=10)
    assert metrics.status_code == 200 and "awooop_admissions_total" in metrics.text


def ping_without_database(env: dict[str, str]) -> None:
    """A Celery command that needs only the broker works without the database's URL."""
    without = {
        k: v for k, v in env.items() if k not in ("AWOOOP_DATABASE_URL", "AWOOOP_SECRET_KEY")
    }
    out = run(
        [str(BIN / "celery"), "-A", "awooop.tasks.app", "inspect", "ping", "-t", "5"], without
    )
    assert "pong" in out, out
    step("celery inspect ping without AWOOOP_DATABASE_URL: pong")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
