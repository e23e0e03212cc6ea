"""A pytest plugin: the ``awooop_env`` fixture runs a workflow end to end in this process on
a real PostgreSQL (:class:`awooop.testing.environment.AwooopEnv`).

Enabled by installing AwoooP (its ``pytest11`` entry point), or with
``pytest_plugins = ["awooop.testing.pytest_plugin"]`` in a top-level ``conftest.py``. Without
a PostgreSQL server (``AWOOOP_DATABASE_URL``, or ``awooop dev up``'s) a test using it skips.

Nothing of AwoooP is imported until a test asks for the fixture: a conftest.py that sets
AwoooP's environment (metrics directory, broker) first still takes effect.

::

    def test_restart(awooop_env):
        run_id = awooop_env.start(RESTART, {"service": "web"})
        assert awooop_env.drive(run_id)["status"] == "COMPLETED"
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from awooop.testing.environment import AwooopEnv


@pytest.fixture(scope="session")
def awooop_template_database() -> Iterator[tuple[str, str]]:
    """(server URL, name) of a database migrated to head once per session."""
    from awooop.testing import environment

    server_url = environment.server_url()
    if server_url is None:
        pytest.skip("no PostgreSQL: set AWOOOP_DATABASE_URL (or run `awooop dev up`)")
    name = environment.create_template(server_url)
    yield server_url, name
    environment.drop_database(server_url, name)


@pytest.fixture
def awooop_env(awooop_template_database: tuple[str, str]) -> Iterator[AwooopEnv]:
    """A database of this test's own, cloned from the session's template, and what a test
    does with runs on it: ``start``, ``drive``, ``signal``, ``tool_result``, ``cancel``,
    ``fire_timers``, ``run``, ``journal``."""
    from awooop.testing import environment

    with environment.environment(*awooop_template_database) as env:
        yield env
