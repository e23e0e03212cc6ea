"""Run messages sent after the answer: the web process's sender thread.

An admission commits its run, answers 202 and hands the run's id to this module; a thread of
the process pushes the ids it has gathered in one send. The request does not wait for the
broker, and at many concurrent requests one push carries many messages.

Nothing depends on the push for correctness: a run whose message is lost — the process ends
before its thread sent it, the broker refuses it — is sent again by the orphan sweep. On a
normal exit the process gives its thread ``EXIT_FLUSH_SECONDS`` to send what is left.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable

log = logging.getLogger("awooop.tasks.handoff")

# Ids per push, at most (one LPUSH of this many messages is a few hundred KiB).
BATCH = 500
# Ids waiting, at most: beyond this (a broker that has hung for a long while) new ones are
# dropped for the orphan sweep rather than held in memory.
MAX_PENDING = 50_000
EXIT_FLUSH_SECONDS = 5.0

Send = Callable[[list[str]], int]


class Sender:
    """Gathers run ids from any thread and sends them from a thread of its own.

    ``send`` is called with up to ``batch`` ids at a time, on the sender's thread only; it
    must not raise (``runs.enqueue`` logs what fails). The thread starts with the first
    :meth:`submit`, in the process that calls it: a sender inherited through ``fork`` starts
    afresh in the child, without the parent's pending ids.
    """

    def __init__(self, send: Send, batch: int = BATCH, max_pending: int = MAX_PENDING) -> None:
        self._send = send
        self._batch = batch
        self._max_pending = max_pending
        self._start()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._changed = threading.Condition()
        self._pending: list[str] = []
        self._sending = 0
        self._thread: threading.Thread | None = None

    def submit(self, run_ids: Iterable[uuid.UUID | str]) -> int:
        """Queue one message per run; returns how many were queued (none while
        ``max_pending`` ids wait: the orphan sweep sends those runs)."""
        ids = [str(run_id) for run_id in run_ids]
        if not ids:
            return 0
        if self._pid != os.getpid():  # forked: the parent's lock and thread are not ours
            self._start()
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="awooop-run-sender", daemon=True
                )
                self._thread.start()
            if len(self._pending) + len(ids) > self._max_pending:
                log.warning(
                    "run messages are not being sent; the orphan sweep will send these",
                    extra={"action": "enqueue_skipped", "run_ids": ids},
                )
                return 0
            self._pending.extend(ids)
            self._changed.notify_all()
        return len(ids)

    def flush(self, timeout: float) -> bool:
        """Wait until every id submitted so far has been handed to ``send``; False when
        ``timeout`` seconds passed first."""
        if self._pid != os.getpid():
            return True
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._sending, timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending)
                batch = self._pending[: self._batch]
                del self._pending[: self._batch]
                self._sending = len(batch)
            try:
                self._send(batch)
            except Exception:  # the thread must outlive any failure: the sweep re-sends
                log.exception(
                    "could not send run messages; the orphan sweep will re-send them",
                    extra={"action": "enqueue_failed", "run_ids": batch},
                )
            finally:
                with self._changed:
                    self._sending = 0
                    self._changed.notify_all()


_sender: Sender | None = None
_sender_lock = threading.Lock()


def sender() -> Sender:
    """The process's sender of ``awooop.runs.execute`` messages."""
    global _sender
    with _sender_lock:
        if _sender is None:
            from awooop.tasks import runs  # the Celery app is only needed to send messages

            _sender = Sender(runs.enqueue)
            atexit.register(_sender.flush, EXIT_FLUSH_SECONDS)
        return _sender


def submit(run_ids: Iterable[uuid.UUID | str]) -> int:
    """Send one execute message per run from the process's sender thread (after the caller
    committed the runs)."""
    return sender().submit(run_ids)


def flush(timeout: float = EXIT_FLUSH_SECONDS) -> bool:
    """Wait until the process's sender has sent what it was given (see :meth:`Sender.flush`)."""
    return _sender.flush(timeout) if _sender is not None else True
