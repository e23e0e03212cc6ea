"""A worker process's finisher: the last write of a run segment, committed while the task
returns, Celery acknowledges its message and the next message comes in.

Once a run is claimed durably its recovery comes from its lease, not from its message: a
process that dies before the finish commits is a worker that died during the last step —
its lease runs out, the run is taken over and the step's outcome recorded again under the
same effect id. A client sees a run COMPLETED only once the finish has committed. The finish
is the same fenced statement as ever (:mod:`awooop.engine.runner` builds it); when it
matches no row because an operator's cancel or pause, or the run's deadline, landed
meanwhile, the runner keeps the step's outcome and hands the run back, and the next segment
acts on the intent.

One thread per process commits the finishes in order, on a connection of its own; at most
:data:`BACKLOG` wait, so a database slower than the handlers holds the next run back
instead of piling finishes up. A worker's warm shutdown waits for them (:meth:`drain`).
River's asynchronous job completer is the precedent.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from awooop import db

log = logging.getLogger("awooop.engine.finisher")

# Finishes waiting to be committed before :meth:`Finisher.submit` blocks.
BACKLOG = 4

# A run's finish, given the finisher's connection; what it returns goes to ``ended``.
Finish = Callable[[db.HeldConnection], Any]


class Finisher:
    """Commits submitted finishes one after the other on its own thread; ``ended`` is told
    each run's result once its finish is done (a failed finish is logged; the run's lease
    recovers it)."""

    def __init__(self, engine: Engine, ended: Callable[[uuid.UUID, Any], object]) -> None:
        self._engine = engine
        self._ended = ended
        # (run id, its finish), or (None, a marker :meth:`drain` waits for)
        self._queue: queue.Queue[tuple[uuid.UUID | None, Finish]] = queue.Queue(BACKLOG)
        self._thread = threading.Thread(target=self._loop, name="run-finisher", daemon=True)
        self._thread.start()

    def submit(self, run_id: uuid.UUID, finish: Finish) -> None:
        self._queue.put((run_id, finish))

    def drain(self, timeout: float) -> bool:
        """Wait until every submitted finish is done; False if some were still pending
        after ``timeout`` seconds (their runs' leases recover them)."""
        done = threading.Event()
        self._queue.put((None, lambda _conn: done.set()))
        return done.wait(timeout)

    def _loop(self) -> None:
        conn = db.HeldConnection(self._engine)
        while True:
            run_id, finish = self._queue.get()
            if run_id is None:
                finish(conn)
                continue
            try:
                result = finish(conn)
            except Exception:
                log.exception(
                    "could not finish the run; its lease will expire",
                    extra={"action": "finish_failed", "run_id": str(run_id)},
                )
                conn.close()
                continue
            try:
                self._ended(run_id, result)
            except Exception:
                log.exception("finish callback failed", extra={"action": "finish_callback_failed"})


_finisher: tuple[int, Finisher] | None = None
_lock = threading.Lock()


def for_process(engine: Engine, ended: Callable[[uuid.UUID, Any], object]) -> Finisher:
    """This process's finisher (a forked child makes its own)."""
    global _finisher
    with _lock:
        if _finisher is None or _finisher[0] != os.getpid():
            _finisher = (os.getpid(), Finisher(engine, ended))
        return _finisher[1]


def drain(timeout: float) -> bool:
    """Wait for this process's pending finishes, if it has a finisher."""
    current = _finisher
    if current is None or current[0] != os.getpid():
        return True
    return current[1].drain(timeout)
