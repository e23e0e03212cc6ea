"""A web process that exits normally sends the run messages its sender still holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from base64 import b64decode


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

    bodies = [json.loads(m)["body"] for m in redis_client.lrange("runs", 0, -1)]
    assert sorted(json.loads(b64decode(b))[0][0] for b in bodies) == sorted(run_ids)
