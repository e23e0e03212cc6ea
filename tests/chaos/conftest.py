"""Fixtures of the fault-injection suite (``make chaos``; not part of the default ``pytest``).

A scenario is a test in ``tests/chaos/`` marked ``chaos`` that uses:

- ``chaos_services`` (session): :class:`~tests.chaos.services.Services` — the suite's own
  PostgreSQL (fsync on; ``.postgres.restart("fast" | "immediate")``, ``.stop()``,
  ``.start()``, ``.kill()``) and Redis (``.redis.kill()``, ``.start()``, ``.flushall()``),
  on free ports, data in a temporary directory; plus the migrated template database.
- ``chaos_stack`` (per test): :class:`~tests.chaos.stack.ChaosStack` over a fresh database
  cloned from the template and a flushed Redis, with a project (``.project``: id, API token,
  channel secrets) routed to ``chaos-saga`` and a :class:`~tests.chaos.recorder.Recorder`
  (``.recorder``). Call ``.start(...)`` to launch web, workers (``.workers["worker-a"]``…,
  :class:`~tests.chaos.stack.Worker` handles), the maintenance worker and beat; everything it
  started is stopped when the test ends, pass or fail (logs under
  ``.awooop/chaos/logs/<test>/``, their tails printed on failure). ``.engine`` reads the
  database, ``.provider(...)`` delivers events like a real provider.
- ``recorder``: the same recorder as ``chaos_stack.recorder``.
- ``figures`` (per test): a :class:`~tests.chaos.report.Figures` dict; call
  ``figures.scenario("<n>", "<title>")``, then set figures as they are measured. They are
  printed and appended to the results file even when the test fails, and written into
  ``docs/reliability.md`` when it passes at full size.

Assertions come from PostgreSQL and the recorder (:mod:`tests.chaos.checks`).
"""

from __future__ import annotations

import os
import re
import secrets as std_secrets
import shutil
import signal
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from awooop import cli, db, secrets
from awooop.config import Settings
from awooop.store import projects
from tests.chaos import report
from tests.chaos.recorder import Recorder
from tests.chaos.services import Services
from tests.chaos.stack import ChaosStack
from tests.support import transitions
from tests.support.processes import ROOT

TEMPLATE = "chaos_template"
LOGS = ROOT / ".awooop" / "chaos" / "logs"
_SESSION_RESULTS: list[dict] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: a fault-injection scenario (make chaos)")
    # SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the fixtures still stop every
    # server and process this suite started.
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/chaos/" in item.nodeid:
            item.add_marker(pytest.mark.chaos)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _SESSION_RESULTS:
        written = report.write_docs(_SESSION_RESULTS)
        if written:
            print(f"\nchaos: figures of scenarios {', '.join(written)} written to {report.DOC}")


@pytest.fixture(scope="session")
def chaos_services() -> Iterator[Services]:
    services = Services().start()
    try:
        admin = create_engine(services.postgres.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{TEMPLATE}"'))
        admin.dispose()
        _migrate(services.postgres.url(TEMPLATE))
        yield services
    finally:
        services.stop()


def _migrate(url: str) -> None:
    from alembic import command
    from alembic.config import Config

    engine = create_engine(url)
    config = Config(str(ROOT / "alembic.ini"))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        # As in the rest of the suite: every statement is checked against the state machine.
        conn.execute(text(transitions.trigger_sql()))
    engine.dispose()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.close()


@pytest.fixture
def chaos_stack(
    chaos_services: Services, recorder: Recorder, request: pytest.FixtureRequest
) -> Iterator[ChaosStack]:
    name = f"chaos_{std_secrets.token_hex(5)}"
    admin = create_engine(chaos_services.postgres.admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"'))
    chaos_services.redis.flushall()
    settings = Settings(
        database_url=chaos_services.postgres.url(name),
        broker_url=chaos_services.redis.url,
        secret_key=os.environ.get("AWOOOP_SECRET_KEY") or secrets.new_encryption_key(),
    )
    project = cli.create_project(settings, "chaos")
    engine = db.make_engine(settings.database_url, pool_size=1)
    with db.transaction(engine) as conn:
        projects.set_routes(conn, "chaos", {"api": "chaos-saga", "gitea": "chaos-saga"})
    engine.dispose()

    log_dir = LOGS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    stack = ChaosStack(
        services=chaos_services,
        database=name,
        settings=settings,
        project=project,
        recorder=recorder,
        log_dir=log_dir,
    )
    try:
        yield stack
    finally:
        stack.stop()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print(f"\nchaos: logs in {log_dir}\n{stack.logs()}")
        admin.dispose()  # its pooled connection did not survive a scenario that restarted PG
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[report.Figures]:
    figures = report.Figures()
    yield figures
    rep = getattr(request.node, "rep_call", None)
    passed = bool(rep is not None and rep.passed)
    entry = figures.entry(passed, request.node.nodeid)
    report.append(entry)
    _SESSION_RESULTS.append(entry)
    print(f"\nchaos scenario {figures.id} ({'passed' if passed else 'FAILED'}): {figures.title}")
    for key, value in figures.items():
        print(f"  {key}: {value}")
