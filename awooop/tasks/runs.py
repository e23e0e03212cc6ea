"""Run tasks: ``awooop.runs.execute`` and the helper that sends its message."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from sqlalchemy import Engine

from awooop import db, logs, metrics
from awooop.config import Settings, get_settings
from awooop.engine import cut_off, finisher, runner
from awooop.tasks import notifications, publish
from awooop.tasks.app import app

log = logging.getLogger("awooop.tasks.runs")

EXECUTE = "awooop.runs.execute"
RUNS_QUEUE = "runs"


@app.task(name=EXECUTE)
def execute(run_id: str) -> str:
    return handle(db.get_engine(db.WORKER), get_settings(), run_id)


def handle(engine: Engine, settings: Settings, run_id: str) -> str:
    """Claim the run and drive it; a message for a run someone else holds is a no-op. The
    write that ends the run is the process's finisher's, committed while this task returns
    and its message is acknowledged. When the database does not answer the claim, the
    message is sent again and this process waits for its database
    (:mod:`awooop.engine.cut_off`)."""
    with logs.bound(run_id=run_id):
        outcome = runner.execute(
            engine,
            settings,
            uuid.UUID(run_id),
            notify=notifications.enqueue,
            finisher=finisher.for_process(engine, segment_ended),
        )
    if outcome is not runner.Outcome.FINISHING:
        segment_ended(run_id, outcome)
    if outcome is runner.Outcome.UNREACHABLE:
        cut_off.wait_for_database(engine, settings)
    return outcome.value


# Segments after which the run wants a new message at once.
_SEND_AGAIN = frozenset(
    {runner.Outcome.WOKEN, runner.Outcome.HANDED_BACK, runner.Outcome.UNREACHABLE}
)


def segment_ended(run_id: uuid.UUID | str, outcome: runner.Outcome) -> None:
    """Count how a segment ended (here, or in the finisher), and send the run again if it
    wants to go on at once."""
    metrics.RUN_SEGMENTS.labels(outcome.value).inc()
    if outcome in _SEND_AGAIN:
        enqueue([run_id])


def enqueue(run_ids: Iterable[uuid.UUID | str]) -> int:
    """Send one execute message per run, after the caller committed. Returns how many sent.

    A failed send is logged, not raised: the runs are already committed, and the orphan
    sweep re-sends messages for runs nobody claimed.
    """
    ids = [str(run_id) for run_id in run_ids]
    if not ids:
        return 0
    try:
        return publish.send_each(execute, RUNS_QUEUE, ids)
    except publish.Unavailable:
        # Logged once, when the push failed; until the publisher tries again these runs
        # wait for the orphan sweep.
        log.debug(
            "broker unavailable; the orphan sweep will send the run messages",
            extra={"action": "enqueue_skipped", "run_ids": ids},
        )
        return 0
    except Exception:
        log.exception(
            "could not send run messages; the orphan sweep will re-send them",
            extra={"action": "enqueue_failed", "run_ids": ids},
        )
        return 0
