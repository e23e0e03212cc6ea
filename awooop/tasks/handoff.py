"""Run messages sent after the answer: the web process's sender thread.

An admission commits its run, answers 202 and hands the run's id to this module; a thread of
the process pushes the ids it has gathered in one send. The request does not wait for the
broker. After each push the thread sleeps ``PUSH_INTERVAL_SECONDS``: an id submitted to an
idle thread leaves at once, and under load the ids that arrive within an interval share one
push and wake no thread (a push and a thread wake-up for each request were a large share of
the web process's CPU).

Nothing depends on the push for correctness: a run whose message is lost — the process ends
before its thread sent it, the broker refuses it — is sent again by the orphan sweep. On a
normal exit the process gives its thread ``EXIT_FLUSH_SECONDS`` to send what is left.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable

log = logging.getLogger("awooop.tasks.handoff")

# Ids per push, at most (one LPUSH of this many messages is a few hundred KiB).
BATCH = 500
# The sender's pause after each push: at most this long an id waits for the next one.
PUSH_INTERVAL_SECONDS = 0.005
# Submissions waiting, at most: beyond this (a broker that has hung for a long while) new
# runs are left to the orphan sweep rather than held in memory.
MAX_PENDING = 50_000
EXIT_FLUSH_SECONDS = 5.0

Send = Callable[[list[str]], int]


class Sender:
    """Takes run ids from any thread and sends them from a thread of its own.

    ``send`` is called with up to ``batch`` ids at a time, on the sender's thread only; it
    must not raise (``runs.enqueue`` logs what fails). The thread starts with the first
    :meth:`submit`. A request thread only puts its ids on a queue (no lock of this class is
    taken): the handover is one of ``queue.SimpleQueue``'s, the cheapest the standard
    library has.
    """

    def __init__(
        self,
        send: Send,
        batch: int = BATCH,
        max_pending: int = MAX_PENDING,
        interval: float = PUSH_INTERVAL_SECONDS,
    ) -> None:
        self._send = send
        self._batch = batch
        self._interval = interval
        self._max_pending = max_pending
        self._queue: queue.SimpleQueue[list[str] | threading.Event] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def submit(self, run_ids: Iterable[uuid.UUID | str]) -> int:
        """Queue one message per run; returns how many were queued (none while
        ``max_pending`` submissions wait: the orphan sweep sends those runs)."""
        ids = [str(run_id) for run_id in run_ids]
        if not ids:
            return 0
        if self._thread is None:
            self._start()
        if self._queue.qsize() >= self._max_pending:
            log.warning(
                "run messages are not being sent; the orphan sweep will send these",
                extra={"action": "enqueue_skipped", "run_ids": ids},
            )
            return 0
        self._queue.put(ids)
        return len(ids)

    def flush(self, timeout: float) -> bool:
        """Wait until every id submitted so far has been handed to ``send``; False when
        ``timeout`` seconds passed first."""
        if self._thread is None:
            return True
        reached = threading.Event()
        self._queue.put(reached)  # set once everything queued before it was sent
        return reached.wait(timeout)

    def _start(self) -> None:
        with self._starting:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="awooop-run-sender", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            item = self._queue.get()  # the thread sleeps here while nothing is submitted
            while True:
                self._push(*self._take(item))
                # What is submitted within the next interval goes in the next push, and
                # submitting it wakes no thread.
                time.sleep(self._interval)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break

    def _push(self, ids: list[str], reached: list[threading.Event]) -> None:
        for start in range(0, len(ids), self._batch):
            batch = ids[start : start + self._batch]
            try:
                self._send(batch)
            except Exception:  # the thread must outlive any failure: the sweep re-sends
                log.exception(
                    "could not send run messages; the orphan sweep will re-send them",
                    extra={"action": "enqueue_failed", "run_ids": batch},
                )
        for event in reached:
            event.set()

    def _take(self, first: list[str] | threading.Event) -> tuple[list[str], list[threading.Event]]:
        """``first`` and what else waits, until a batch is full; and the flush markers among
        them (each is reached once the ids taken with it are sent)."""
        ids: list[str] = []
        reached: list[threading.Event] = []
        item = first
        while True:
            if isinstance(item, threading.Event):
                reached.append(item)
            else:
                ids += item
            if len(ids) >= self._batch:
                return ids, reached
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return ids, reached


_sender: Sender | None = None
_sender_lock = threading.Lock()


def sender() -> Sender:
    """The process's sender of ``awooop.runs.execute`` messages."""
    global _sender
    made = _sender
    if made is not None:  # every admission asks: no lock once the sender is made
        return made
    with _sender_lock:
        if _sender is None:
            from awooop.tasks import runs  # the Celery app is only needed to send messages

            _sender = Sender(runs.enqueue)
        return _sender


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it makes a sender of its own."""
    global _sender, _sender_lock
    _sender, _sender_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def submit(run_ids: Iterable[uuid.UUID | str]) -> int:
    """Send one execute message per run from the process's sender thread (after the caller
    committed the runs)."""
    return sender().submit(run_ids)


def flush(timeout: float = EXIT_FLUSH_SECONDS) -> bool:
    """Wait until the process's sender has sent what it was given (see :meth:`Sender.flush`)."""
    return _sender.flush(timeout) if _sender is not None else True


atexit.register(flush)  # the sender of the process that exits (a forked child's own, or none)
