"""Shared fixtures: a real PostgreSQL (a template database migrated once per session,
cloned per test) and a real Redis broker.

Services come from the environment `make test` prepares (`awooop dev up` writes
`.awooop/env`): the embedded servers on a fresh machine, or the configured ones. A test
that needs a service it cannot find skips locally but fails under ``CI=true``.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from awooop import db, secrets
from awooop.config import Settings
from tests.support import transitions

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI") == "true"
# Tests use their own Redis database so a developer's queued messages are never touched.
# Two test sessions running at once on one machine need different ones.
TEST_REDIS_DB = int(os.environ.get("AWOOOP_TEST_REDIS_DB", "13"))


def _require_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        message = f"{name} is not set: run the tests through `make test`"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return value


def _test_broker_url() -> str | None:
    url = os.environ.get("AWOOOP_TEST_BROKER_URL") or os.environ.get("AWOOOP_BROKER_URL")
    if not url:
        return None
    return urlunsplit(urlsplit(url)._replace(path=f"/{TEST_REDIS_DB}"))


# The Celery app in this process (used by the web app to send messages) must point at the
# test broker database before anything imports awooop.tasks.
if _test_broker_url():
    os.environ["AWOOOP_BROKER_URL"] = _test_broker_url()
os.environ.setdefault("AWOOOP_SECRET_KEY", secrets.new_encryption_key())
# Metrics in this process stay in memory (prometheus_client reads the variable on import);
# tests that start real processes give them a fresh directory of their own.
os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)


@pytest.fixture(scope="session")
def server_url() -> str:
    """The PostgreSQL server's maintenance database (for CREATE/DROP DATABASE)."""
    url = make_url(_require_env("AWOOOP_DATABASE_URL"))
    return url.set(database="postgres").render_as_string(hide_password=False)


def _admin(server_url: str) -> Engine:
    return create_engine(server_url, isolation_level="AUTOCOMMIT", pool_size=1)


@pytest.fixture(scope="session")
def template_database(server_url: str) -> Iterator[str]:
    """A database migrated to head once per session; tests clone it."""
    from alembic import command
    from alembic.config import Config

    name = f"awooop_tpl_{os.getpid()}"
    admin = _admin(server_url)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    config = Config(str(ROOT / "alembic.ini"))
    with engine.connect() as conn:  # outside a transaction: concurrent index builds
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        # Every statement the suite runs is checked against the state machine's tables.
        conn.execute(text(transitions.trigger_sql()))
        conn.commit()
    engine.dispose()
    yield name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


class _Clones:
    """Clones of the template, each made before a test asks for it.

    A clone takes PostgreSQL about 0.15 s to write (every page of the template goes through
    the WAL), and most tests use one: made on this thread of its own while the previous tests
    run, it is ready when asked for. Every test still gets a database no test has touched.
    """

    AHEAD = 2

    def __init__(self, server_url: str, template: str) -> None:
        self._admin = _admin(server_url)
        self._template = template
        self._maker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clones")
        self._ready: deque[Future[str]] = deque(
            self._maker.submit(self._make) for _ in range(self.AHEAD)
        )

    def _make(self) -> str:
        name = f"awooop_t_{uuid.uuid4().hex[:12]}"
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"'))
        return name

    def take(self) -> str:
        self._ready.append(self._maker.submit(self._make))
        return self._ready.popleft().result()

    def drop(self, name: str) -> None:
        """Drop ``name``, ending the sessions a test left in it. DROP ... WITH (FORCE) alone
        checks for them in steps of 0.1 s; ending them first and watching them go takes a few
        milliseconds. FORCE still ends a session that connects in between."""
        sessions = "FROM pg_stat_activity WHERE datname = :name"
        with self._admin.connect() as conn:
            conn.execute(text(f"SELECT pg_terminate_backend(pid) {sessions}"), {"name": name})
            deadline = time.monotonic() + 5
            left = text(f"SELECT count(*) {sessions}")
            while conn.execute(left, {"name": name}).scalar() and time.monotonic() < deadline:
                time.sleep(0.002)
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def close(self) -> None:
        self._maker.shutdown(wait=True)
        for made in self._ready:
            if made.exception() is None:
                self.drop(made.result())
        self._admin.dispose()


@pytest.fixture(scope="session")
def _clones(server_url: str, template_database: str) -> Iterator[_Clones]:
    clones = _Clones(server_url, template_database)
    yield clones
    clones.close()


@pytest.fixture
def database_url(server_url: str, _clones: _Clones) -> Iterator[str]:
    """A fresh, migrated database of this test's own, dropped when the test ends."""
    name = _clones.take()
    yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    _clones.drop(name)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """The production engine configuration (autocommit) over this test's database."""
    engine = db.make_engine(database_url, pool_size=12)
    yield engine
    # The lease keeper (and its liveness beat) started by this test's runs stops with it.
    from awooop.engine import lease

    lease.stop_keeper()
    db.release_thread_connection()  # the test client's admissions ran on this thread
    engine.dispose()


@pytest.fixture
def broker_url() -> str:
    url = _test_broker_url()
    if url is None:
        _require_env("AWOOOP_BROKER_URL")
    assert url is not None
    return url


@pytest.fixture
def redis_client(broker_url: str):
    """The test broker's Redis database, emptied before the test."""
    import redis

    from awooop.tasks import handoff

    client = redis.Redis.from_url(broker_url)
    # An earlier test's run messages still in the web app's sender would land after the flush.
    handoff.flush(timeout=10)
    try:
        client.flushdb()
    except redis.ConnectionError:
        if IN_CI:
            pytest.fail(f"no Redis at {broker_url}")
        pytest.skip(f"no Redis at {broker_url}")
    yield client
    client.close()


@pytest.fixture
def settings(database_url: str, broker_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        broker_url=broker_url,
        secret_key=os.environ["AWOOOP_SECRET_KEY"],
        lease_ttl_seconds=30.0,
        heartbeat_interval_seconds=5.0,
        max_body_bytes=64 * 1024,
        log_level="WARNING",
    )


@pytest.fixture
def project(settings: Settings, engine: Engine) -> dict:
    """A project routed to the demo workflows, with its fresh credentials."""
    from awooop import cli

    return cli.create_project(settings, f"p{uuid.uuid4().hex[:8]}")


# Suites that start servers, processes (and, for the cluster, network namespaces) of their
# own and take minutes: `make chaos`, `make cluster`.
OWN_SUITES = (ROOT / "tests" / "chaos", ROOT / "tests" / "cluster")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fault-injection suite (``tests/chaos``, ``make chaos``) and the cluster suite
    (``tests/cluster``, ``make cluster``) run only when asked for by path (``pytest
    tests/chaos``)."""
    if collection_path not in OWN_SUITES:
        return None
    here = config.invocation_params.dir
    for arg in config.args:
        asked = (here / arg.split("::")[0]).resolve()
        if asked == collection_path or collection_path in asked.parents:
            return None
    return True


# Workflows only the tests use register on import.
import tests.support.workflows  # noqa: E402, F401


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workflow registry as it is now, restored afterwards: what a test registers (a
    page's examples, say) stays its own."""
    from awooop.workflows import registry

    registry.load()
    monkeypatch.setattr(registry, "_WORKFLOWS", dict(registry._WORKFLOWS))
