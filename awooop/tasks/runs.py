"""Run tasks: ``awooop.runs.execute`` and the helper that sends its message."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from awooop import db
from awooop.config import get_settings
from awooop.engine import runner
from awooop.tasks.app import app

log = logging.getLogger("awooop.tasks.runs")

EXECUTE = "awooop.runs.execute"


@app.task(name=EXECUTE)
def execute(run_id: str) -> str:
    """Claim the run and drive it; a message for a run someone else holds is a no-op."""
    outcome = runner.execute(db.get_engine(), get_settings(), uuid.UUID(run_id))
    return outcome.value


def enqueue(run_ids: Iterable[uuid.UUID | str]) -> int:
    """Send one execute message per run, after the caller committed. Returns how many sent.

    A failed send is logged, not raised: the run is already committed, and the orphan sweep
    re-sends messages for runs nobody claimed.
    """
    sent = 0
    for run_id in run_ids:
        try:
            execute.apply_async((str(run_id),), queue="runs")
            sent += 1
        except Exception:
            log.exception(
                "could not send run message; the orphan sweep will re-send it",
                extra={"action": "enqueue_failed", "run_id": str(run_id)},
            )
    return sent
