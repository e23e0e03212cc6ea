"""Beat given a schedule file in a directory that does not exist (the default one,
``.awooop/celerybeat-schedule`` under the working directory, outside a checkout) refuses to
start with one line naming ``AWOOOP_BEAT_SCHEDULE_FILE`` and exit status 2, not a traceback.

A real ``celery beat`` in a subprocess, against the test database (its schema check comes
first).
"""

from __future__ import annotations

import os
import subprocess

from tests.support.processes import BIN, ROOT

# Nothing listens on port 1: beat must stop before it sends anything.
UNREACHABLE_BROKER = "redis://127.0.0.1:1/0"


def test_beat_refuses_a_schedule_file_whose_directory_does_not_exist(tmp_path, database_url):
    schedule = tmp_path / "missing" / "celerybeat-schedule"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(
        # this test's migrated database: the environment's may have no schema, and beat
        # refuses that first (exit 2 as well)
        AWOOOP_DATABASE_URL=database_url,
        AWOOOP_BROKER_URL=UNREACHABLE_BROKER,
        AWOOOP_BEAT_SCHEDULE_FILE=str(schedule),
        AWOOOP_METRICS_PORT="0",
    )

    result = subprocess.run(
        [str(BIN / "celery"), "-A", "awooop.tasks.app", "--quiet", "beat", "--loglevel", "INFO"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    refusal = [line for line in result.stderr.splitlines() if "AWOOOP_BEAT_SCHEDULE_FILE" in line]
    assert refusal == [
        f"awooop: configuration error: AWOOOP_BEAT_SCHEDULE_FILE={schedule}: the directory "
        f"{schedule.parent} does not exist (create it, or point the variable at one that does)"
    ], result.stderr
    assert not schedule.parent.exists()
