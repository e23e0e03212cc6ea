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

from collections.abc import Iterator

import pytest

from tests.chaos import report, stack
from tests.chaos.recorder import Recorder
from tests.chaos.services import Services
from tests.chaos.stack import ChaosStack
from tests.support import suites
from tests.support.processes import ROOT
from tests.support.suites import pytest_runtest_makereport  # noqa: F401 - a hook

TEMPLATE = "chaos_template"
LOGS = ROOT / ".awooop" / "chaos" / "logs"
_SESSION_RESULTS: list[dict] = []


def pytest_configure(config: pytest.Config) -> None:
    suites.configure(config, "chaos", "a fault-injection scenario (make chaos)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    suites.mark(items, "tests/chaos/", "chaos")


def pytest_sessionfinish(session: pytest.Session) -> None:
    suites.write_figures(report.CHAOS, _SESSION_RESULTS)


@pytest.fixture(scope="session")
def chaos_services() -> Iterator[Services]:
    services = Services().start()
    try:
        services.create_template(TEMPLATE)
        yield services
    finally:
        services.stop()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.close()


@pytest.fixture
def chaos_stack(
    chaos_services: Services, recorder: Recorder, request: pytest.FixtureRequest
) -> Iterator[ChaosStack]:
    with stack.scenario(
        ChaosStack,
        chaos_services,
        TEMPLATE,
        recorder,
        LOGS / request.node.name,
        lambda: suites.failed(request),
    ) as chaos:
        yield chaos


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[report.Figures]:
    yield from suites.figures(request, report.CHAOS, _SESSION_RESULTS)
