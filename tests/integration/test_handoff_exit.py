"""A web process that exits normally sends the run messages its sender still holds."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.integration.conftest import queued_run_ids


def test_messages_still_in_the_sender_are_sent_at_exit(broker_url, redis_client):
    run_ids = [str(uuid.uuid4()) for _ in range(3)]
    script = (
        "import sys\n"
        "from awooop.tasks import handoff\n"
        "handoff.submit(sys.argv[1:])\n"  # the interpreter exits right after
    )
    subprocess.run(
        [sys.executable, "-c", script, *run_ids],
        env={**os.environ, "AWOOOP_BROKER_URL": broker_url},
        check=True,
        timeout=60,
    )

    assert sorted(queued_run_ids(redis_client)) == sorted(run_ids)
