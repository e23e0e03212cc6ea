"""What the suites that run on stacks of their own (``tests/chaos``, ``tests/cluster``) share
in their conftests: stopping cleanly on SIGTERM, their marker, each test's outcome for its
fixtures, and the figures of each scenario."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chaos import report


def configure(config: pytest.Config, marker: str, description: str) -> None:
    """Register the suite's marker; make SIGTERM (a CI timeout, ``kill``) unwind like
    Ctrl-C, so the fixtures still stop every server and process the suite started."""
    config.addinivalue_line("markers", f"{marker}: {description}")
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def mark(items: list[pytest.Item], folder: str, marker: str) -> None:
    """Mark every test under ``folder`` (e.g. ``tests/chaos/``) with ``marker``."""
    for item in items:
        if folder in item.nodeid:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the test (``item.rep_call``) for its fixtures."""
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is not None and rep.failed


def figures(
    request: pytest.FixtureRequest, suite: report.Suite, results: list[dict[str, Any]]
) -> Iterator[report.Figures]:
    """The body of a suite's ``figures`` fixture: the scenario's figures, printed and
    recorded when the test ends, pass or fail (kept in ``results`` for the session's end)."""
    found = report.Figures(suite)
    yield found
    rep = getattr(request.node, "rep_call", None)
    results.append(found.finish(bool(rep is not None and rep.passed), request.node.nodeid))


def write_figures(suite: report.Suite, results: list[dict[str, Any]]) -> None:
    """At the session's end: the figures of the scenarios that passed at full size into the
    suite's document."""
    if results:
        written = suite.write_docs(results)
        if written:
            print(
                f"\n{suite.name}: figures of scenarios {', '.join(written)} written to {suite.doc}"
            )
