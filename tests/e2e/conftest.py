from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from awooop.config import Settings
from tests.support.processes import ROOT, Stack


@pytest.fixture
def stack(settings: Settings, redis_client, tmp_path) -> Iterator[Stack]:
    """Real processes over this test's database and the test broker, with short timings.

    Their logs are printed when the test fails (pytest shows teardown output then).
    """
    env = {
        **os.environ,
        "AWOOOP_DATABASE_URL": settings.database_url,
        "AWOOOP_BROKER_URL": settings.broker_url,
        "AWOOOP_SECRET_KEY": settings.secret_key,
        "AWOOOP_WORKFLOW_MODULES": "tests.support.workflows",
        "AWOOOP_LEASE_TTL_SECONDS": "3",
        "AWOOOP_HEARTBEAT_INTERVAL_SECONDS": "1",
        "AWOOOP_REAPER_INTERVAL_SECONDS": "2",
        "AWOOOP_ORPHAN_INTERVAL_SECONDS": "1",
        "AWOOOP_ORPHAN_AFTER_SECONDS": "2",
        "AWOOOP_TIMER_INTERVAL_SECONDS": "0.5",
        "AWOOOP_BEAT_SCHEDULE_FILE": str(tmp_path / "celerybeat-schedule"),
        "AWOOOP_WEB_WORKERS": "2",
        "AWOOOP_ACCESS_LOG": "0",
        # A fresh multiprocess metrics directory: /metrics counts this test's events only.
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    stack = Stack(env, tmp_path)
    yield stack
    stack.stop()
    print(stack.logs())
