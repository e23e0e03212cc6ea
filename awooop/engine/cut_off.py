"""A worker process whose database does not answer its claim.

A claim that fails because the database could not answer (a partition, a restart, a connect
timeout) leaves the run as it was: claimable by anyone. (A claim that committed before its
reply was lost is never renewed, and the reaper hands the run on.) Had the task simply
ended, Celery would acknowledge the message, and a process cut off from its database would
take run messages faster than a healthy one (each fails within the connect timeout) and drop
every one of them, each run then waiting for the orphan sweep.

So the task sends the run's message again at once, for a worker that can reach the database,
and :func:`wait_for_database` holds the pool process, which takes no other message
meanwhile, until the database answers a fresh connection: asked every
``AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS``, for at most
``AWOOOP_WORKER_DEAD_AFTER_SECONDS``. A process that cannot reach its database that long is
one the reaper treats as dead; past it the process takes a message again (and, still cut
off, gives it back again), and a warm shutdown is never held longer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy import Engine

from awooop import db
from awooop.config import Settings

log = logging.getLogger("awooop.engine.cut_off")


def wait_for_database(
    engine: Engine,
    settings: Settings,
    answers: Callable[[Engine], bool] = db.answers,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Return once the database ``engine`` reaches answers (True), or after
    ``worker_dead_after_seconds`` without an answer (False)."""
    started = clock()
    deadline = started + settings.worker_dead_after_seconds
    while True:
        asked = clock()
        if answers(engine):
            answered = True
            break
        if clock() >= deadline:
            answered = False
            break
        # the pace of the liveness beat, counted from the start of the last question
        sleep(max(0.0, min(deadline, asked + settings.worker_liveness_interval_seconds) - clock()))
    log.log(
        logging.INFO if answered else logging.WARNING,
        "database answers again; taking run messages"
        if answered
        else "database still not answering; taking run messages again",
        extra={
            "action": "database_answers" if answered else "database_still_away",
            "waited_s": round(clock() - started, 3),
        },
    )
    return answered
