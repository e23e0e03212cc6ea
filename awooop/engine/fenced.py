"""A lease holder's writes that survive a database hiccup.

Every fenced write is a compare-and-set on the lease, the saga status the holder saw and the
journal's length, so applying it twice is applying it once. That makes it safe to try again
after a transient error — even one whose statement committed before its reply was lost: the
second try matches no row, and the identity the write carries tells the caller that its
first one did (:func:`awooop.store.leases.after_miss`). A write that still fails after
``AWOOOP_WRITE_RETRIES`` tries raises :class:`GaveUp`; the runner then hands the run back so
another worker can claim it at once. :func:`hand_back` is that release, fenced.

Retrying a statement on a transient error is what DBOS's ``@db_retry`` does for its system
database; written here rather than taken from a retry library because the classification
(SQLSTATEs, a connection the pool invalidated) is the whole of the logic.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine, exc

from awooop.config import Settings
from awooop.db import Connects
from awooop.store import leases

log = logging.getLogger("awooop.engine.fenced")

T = TypeVar("T")

# serialization failure, deadlock, statement timeout (query canceled), lock timeout,
# the server shutting down or restarting, connection failures.
TRANSIENT_SQLSTATES = frozenset(
    {"40001", "40P01", "57014", "55P03", "57P01", "57P02", "57P03", "08000", "08003", "08006"}
)


class GaveUp(Exception):
    """A fenced write kept failing on transient database errors."""


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` says the database could not answer now, not that the write is wrong."""
    if not isinstance(error, exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    code = getattr(error.orig, "pgcode", None)
    if code is not None:
        return code in TRANSIENT_SQLSTATES
    # No SQLSTATE: the driver lost the connection (reset, closed, timed out).
    return isinstance(error, exc.OperationalError)


def backoff(settings: Settings, retry: int, rng: random.Random | None = None) -> float:
    """Seconds before try ``retry + 1``: exponential from the base, capped, jittered ±50 %."""
    ceiling = min(settings.write_retry_max_seconds, settings.write_retry_base_seconds * 2**retry)
    return ceiling * (rng or random).uniform(0.5, 1.0)


def run_with_retries(
    engine: Connects,
    settings: Settings,
    statement: Callable[[Connection], T],
    what: str,
    abandoned: Callable[[], bool] = lambda: False,
) -> tuple[T, bool]:
    """Run ``statement`` (one fenced compare-and-set) on a connection of ``engine``, again on
    a fresh one after a transient error. Returns its result and whether it was retried
    (then a "no row matched" may mean an earlier try committed: ask
    :func:`awooop.store.leases.after_miss`).

    ``abandoned``: whether the write can no longer matter (the lease is known to be lost);
    then a failed try is not repeated — each try may wait out a lock timeout, and a worker
    stuck retrying a write that cannot apply takes no new work meanwhile."""
    retried = False
    for retry in range(settings.write_retries + 1):
        try:
            with engine.connect() as conn:
                return statement(conn), retried
        except exc.DBAPIError as error:
            if not is_transient(error):
                raise
            if retry == settings.write_retries or abandoned():
                raise GaveUp(f"{what}: {type(error.orig).__name__}") from error
            delay = backoff(settings, retry)
            log.warning(
                "fenced write failed on a transient database error; retrying",
                extra={
                    "action": "fenced_write_retry",
                    "write": what,
                    "retry": retry + 1,
                    "delay_s": round(delay, 3),
                    "error": type(error.orig).__name__,
                },
            )
            retried = True
            time.sleep(delay)  # back-off between tries, not a synchronisation
    raise AssertionError("unreachable")


def hand_back(
    engine: Engine, settings: Settings, claim: leases.Claim, reason: str, retry: bool = True
) -> bool:
    """Release a run whose holder stops while its lease may still be held — the run moved in
    a way no intent explains, or the holder stopped believing in its lease — so that another
    worker claims it at once instead of after the lease expires, and without counting the
    claim against the crash budget. Fenced by the lease and the journal's length as ``claim``
    saw it (:data:`awooop.store.leases.HELD_AT`): a lease already gone, or a journal grown
    since, releases nothing. Tried again on transient errors (the database may just be
    answering again) unless ``retry`` is False — after the database kept failing a write,
    one try: each may wait out a lock timeout, and a worker stuck here takes no new work;
    False when nothing was released."""
    fields = {
        "run_id": str(claim.run_id),
        "project_id": claim.project_id,
        "worker_id": claim.worker_id,
        "lease_epoch": claim.lease_epoch,
    }
    try:
        released, _ = run_with_retries(
            engine,
            settings,
            lambda conn: leases.release(conn, claim, 0.0, reason, refund=True),
            "hand_back",
            abandoned=lambda: not retry,
        )
    except (GaveUp, exc.DBAPIError):
        log.warning(
            "could not hand the run back; its lease will expire",
            exc_info=True,
            extra={**fields, "action": "release_failed", "reason": reason},
        )
        return False
    if released:
        log.info(
            "lease still held when the worker stopped; run handed back",
            extra={**fields, "action": "run_released", "reason": reason},
        )
    return released
