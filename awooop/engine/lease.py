"""Keeping leases alive: one supervised keeper per process.

A worker process holds one lease per run it executes. Each :class:`Lease` is registered with
the process's :class:`LeaseKeeper`, whose thread renews every lease that is due; starting a
thread per run would cost more than a short run's whole execution. Renewals go through the
keeper's own small pool (:func:`awooop.db.keeper_engine`) and each gives up after a deadline
(:func:`awooop.db.bounded`), so a hung connection costs one attempt, not the lease: the next
tick retries on a fresh connection.

A worker believes it holds a run (``StepContext.lease_held``, :meth:`Lease.believed`) only
while the timing rule of :mod:`awooop.domain.timing` says no one else may have been handed
it. The lease's ``lost`` event is set, and the handler sees it (``StepContext.lease_lost``),
when

- a renewal matches no row (the reaper took the run, another worker re-claimed it), or
- no renewal succeeded for ``ttl - interval`` seconds since the start of the last one that
  did (the database stayed away, or the keeper stalled): the lease may be about to expire, or
- no liveness beat committed for ``dead_after - margin`` seconds since the start of the last
  one that did: the reaper may be about to judge this process dead.

``believed()`` is exact at the moment it is read; ``lost`` is set within a fraction of the
margin by the keeper's threads.

The runner checks ``believed()`` and stops without writing. Before a segment's final write
it calls :meth:`LeaseKeeper.drop`, after which no renewal of the lease is in flight, so the
renewal cannot race the completion into a false "lease lost".

The keeper is supervised: an exception in its loop is logged (``action=lease_keeper_error``)
and the loop goes on; a supervisor thread replaces a keeper thread that died and marks leases
lost that a stalled keeper failed to renew.

The keeper also says that its process is alive: from the first lease it holds, a third
thread beats the process's liveness row (``awooop_worker``, :mod:`awooop.store.workers`)
every ``AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS``, leases held or not, for as long as the
process lives (its own thread, so that a hung liveness write never delays a lease renewal).
The reaper takes the runs of a worker whose row it has seen unchanged for
``AWOOOP_WORKER_DEAD_AFTER_SECONDS`` (:mod:`awooop.engine.watch`) — a killed process stops
beating at once, while a step that runs for hours under a live process keeps its run.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine

from awooop import db, metrics
from awooop.config import ConfigError, Settings, get_settings
from awooop.domain import timing
from awooop.store import leases, segments, workers

log = logging.getLogger("awooop.engine.lease")

Clock = Callable[[], float]


@dataclass
class _RunningStep:
    """A step whose handler runs now without a timeout of its own."""

    step: str
    attempt: int
    timeout: float
    started: float
    armed: bool = False


class Lease:
    def __init__(
        self,
        engine: Engine,
        claim: leases.Claim,
        ttl: float,
        interval: float,
        clock: Clock = time.monotonic,
        granted_at: float | None = None,
    ) -> None:
        self.claim = claim
        self.ttl = ttl
        self.interval = interval
        self.lost = threading.Event()
        self._engine = engine
        self._clock = clock
        # Held for the whole of a renewal: drop() takes it to wait out one in flight.
        self._lock = threading.Lock()
        self._dropped = False
        # When the last renewal that committed started (the claim counts as one, from
        # ``granted_at``: before its statement was sent): the database computed the lease's
        # expiry after that moment.
        self._renewed_at = clock() if granted_at is None else granted_at
        # The process's liveness belief (set by LeaseKeeper.hold); None: not judged by it.
        self.liveness: Liveness | None = None
        self._step: _RunningStep | None = None

    def due(self, now: float) -> bool:
        return now - self._renewed_at >= self.interval

    def overdue(self, now: float) -> bool:
        """No renewal for ``ttl - interval``: the lease may expire before the next one.

        A lease renewed less than three times per TTL (refused at start by
        :data:`awooop.config_checks.RELATIONS`; tests use it to mean "never renewed") has
        no such budget and is never overdue.
        """
        if not timing.renewals_fit(self.ttl, self.interval):
            return False
        return now - self._renewed_at >= self.ttl - self.interval

    def believed(self) -> bool:
        """Whether this worker may still act on the run: not lost, renewed in time, and its
        process's liveness beats recent enough (:mod:`awooop.domain.timing`). Exact when
        read; the handler reads it as ``ctx.lease_held`` right before a side effect. Once
        false it stays false (the lease is marked lost)."""
        if self.lost.is_set():
            return False
        now = self._clock()
        if self.overdue(now):
            self.mark_lost("keeper", "lease not renewed for ttl - interval; treated as lost")
            return False
        if self.liveness is not None and not self.liveness.believed(now):
            # Latched: a beat that commits later (after the run was taken) must not bring
            # the belief back.
            self.mark_lost(
                "liveness",
                "no liveness beat committed for dead_after - margin; lease treated as lost",
            )
            return False
        return True

    def unbelieved(self) -> bool:
        """``not believed()``: whether a write should no longer be retried."""
        return not self.believed()

    def renew_now(self) -> bool:
        """Renew immediately (a long step's ``ctx.heartbeat()``); False once the lease is lost.

        A renewal that fails (an error, no answer within the deadline) is not a lost lease:
        the lease may still be ours. It is retried at the keeper's next tick.
        """
        with self._lock:
            if self.lost.is_set():
                return False
            if self._dropped:
                return True
            started = self._clock()
            try:
                held = self._renew()
            except Exception:
                metrics.LEASE_RENEWALS.labels("error").inc()
                log.warning(
                    "lease renewal failed", exc_info=True, extra=self._fields("lease_renew_failed")
                )
                return True
            if not held:
                self.mark_lost("renewal", "lease lost")
                metrics.LEASE_RENEWALS.labels("lost").inc()
            else:
                self._renewed_at = started
                metrics.LEASE_RENEWALS.labels("renewed").inc()
            return held

    def _renew(self) -> bool:
        """One renewal statement on the keeper's pool, abandoned after its deadline."""
        deadline = db.keeper_deadline(self._engine, self.interval)
        with (
            db.keeper_engine(self._engine).connect() as conn,
            db.bounded(conn, deadline),
        ):
            return leases.renew(conn, self.claim, self.ttl)

    def running(self, step: str, attempt: int, timeout: float) -> None:
        """The handler of ``step`` (no timeout of its own) starts now. If it is still running
        after a renewal interval (or a quarter of ``timeout``), the keeper arms its timeout:
        a hung handler cannot hold the run for ever, and a quick step costs no write."""
        self._step = _RunningStep(step, attempt, timeout, self._clock())

    def step_ended(self) -> None:
        self._step = None

    def arm_step_timeout_if_due(self) -> None:
        """Arm the running step's timeout once it has run long enough (keeper thread)."""
        running = self._step
        if running is None or running.armed or self.lost.is_set():
            return
        elapsed = self._clock() - running.started
        if elapsed < min(self.interval, running.timeout / 4):
            return
        try:
            deadline = db.keeper_deadline(self._engine, self.interval)
            with db.keeper_engine(self._engine).connect() as conn, db.bounded(conn, deadline):
                armed = segments.arm_default_step_timeout(
                    conn, self.claim, running.step, running.attempt, running.timeout - elapsed
                )
        except Exception:
            log.warning(
                "step timeout could not be armed",
                exc_info=True,
                extra=self._fields("step_timeout_arm_failed"),
            )
            return
        if not armed:  # the row was locked by someone, or the lease is gone: next tick
            return
        running.armed = True
        log.info(
            "long step: its timeout is armed",
            extra={
                **self._fields("step_timeout_armed"),
                "step": running.step,
                "due_in_s": round(running.timeout - elapsed, 3),
            },
        )

    def mark_lost(self, cause: str, message: str) -> None:
        """Set ``lost`` (once) and say why: ``renewal`` (no row matched), ``keeper`` (not
        renewed in time) or ``liveness`` (no liveness beat committed in time)."""
        if self.lost.is_set():
            return
        self.lost.set()
        metrics.LEASE_LOSSES.labels(cause).inc()
        log.warning(message, extra=self._fields("lease_lost"))

    def retire(self) -> None:
        """No renewal after this returns, and none in flight (waits for one to finish)."""
        with self._lock:
            self._dropped = True

    def reinstate(self) -> None:
        """Renewals allowed again: the segment went on after a final write was refused."""
        with self._lock:
            self._dropped = False

    def _fields(self, action: str) -> dict[str, object]:
        return {
            "action": action,
            "run_id": str(self.claim.run_id),
            "project_id": self.claim.project_id,
            "worker_id": self.claim.worker_id,
            "lease_epoch": self.claim.lease_epoch,
        }


class Liveness:
    """The process's belief that the reaper has not judged it dead (:mod:`awooop.domain.timing`).

    It lasts ``dead_after - margin`` from the start of the last liveness beat that committed
    — or, until one is known to have committed, from the start of the first beat attempted,
    since an attempt whose reply was lost may have committed and been seen by the reaper.
    Before any beat is attempted there is no row to judge this process by, and the belief
    holds.
    """

    def __init__(self, dead_after: float, margin: float, clock: Clock = time.monotonic) -> None:
        self.lasts = timing.belief_lasts(dead_after, margin)
        self._clock = clock
        self._basis: float | None = None
        self._lock = threading.Lock()

    def attempting(self) -> float:
        """A beat is about to be sent: its start (the belief's basis if none came before)."""
        started = self._clock()
        with self._lock:
            if self._basis is None:
                self._basis = started
        return started

    def committed(self, started: float) -> None:
        """The beat that started at ``started`` committed."""
        with self._lock:
            if self._basis is None or started > self._basis:
                self._basis = started

    def believed(self, now: float | None = None) -> bool:
        basis = self._basis
        if basis is None:
            return True
        return (self._clock() if now is None else now) - basis < self.lasts


class LeaseKeeper:
    """The process's renewal thread and its supervisor, started on first use.

    ``liveness_interval``, ``dead_after``, ``margin``: how often the worker's liveness row
    is beaten, and how long its belief lasts after a beat (defaults: the settings'
    ``worker_liveness_interval_seconds``, ``worker_dead_after_seconds`` and
    ``worker_belief_margin_seconds``).
    """

    def __init__(
        self,
        clock: Clock = time.monotonic,
        liveness_interval: float | None = None,
        dead_after: float | None = None,
        margin: float | None = None,
    ) -> None:
        settings = _settings()
        self._clock = clock
        self._liveness_interval = liveness_interval or settings.worker_liveness_interval_seconds
        self.liveness = Liveness(
            dead_after or settings.worker_dead_after_seconds,
            margin or settings.worker_belief_margin_seconds,
            clock,
        )
        # Wake often enough to mark leases lost within a quarter of the belief's margin.
        self._belief_tick = max(
            0.05, min(self._liveness_interval, margin or settings.worker_belief_margin_seconds) / 4
        )
        # Each worker id this keeper renews the liveness of (one in a worker process), with
        # the engine to reach its database through, and the last renewal's start.
        self._announced: dict[str, Engine] = {}
        self._announced_at: float | None = None
        # The reaper's last judgement of each worker id, as its beats returned it.
        self._judged_dead_at: dict[str, object] = {}
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()
        # How long the renewal loop sleeps this time round: a lease held meanwhile wakes it
        # only if it needs a shorter sleep (not once per run).
        self._sleep_planned = 0.0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._announce = threading.Event()
        # One beat at a time: the liveness thread's, or that of a hold() that finds the
        # belief lapsed (the process stood still), which waits for one in flight.
        self._beating = threading.Lock()
        self._liveness: threading.Thread | None = None
        self._supervisor: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        """Renew ``lease`` from now on (again, after a :meth:`drop`). A process whose
        liveness belief has lapsed (the database was away) beats first, so that a run
        claimed now is not lost at once."""
        lease.liveness = self.liveness
        if not self.liveness.believed():
            self._announce_due(force=True)
        lease.reinstate()
        with self._lock:
            self._leases[id(lease)] = lease
            if lease._engine is not None and lease.claim.worker_id not in self._announced:
                self._announced[lease.claim.worker_id] = lease._engine
                self._announced_at = None  # renew at once
                self._announce.set()
            self._start()
            shorter = self._tick([lease]) < self._sleep_planned
        if shorter:
            self._wake.set()  # re-plan the sleep for the new lease's interval

    def drop(self, lease: Lease) -> None:
        """Stop renewing ``lease``. When this returns no renewal of it is in flight, so the
        caller's next write (a segment's last) cannot race one. Idempotent."""
        with self._lock:
            self._leases.pop(id(lease), None)
        lease.retire()

    @property
    def thread(self) -> threading.Thread | None:
        """The current keeper thread (tests: to see it replaced)."""
        return self._thread

    def close(self) -> None:
        """Stop the threads (tests; a worker's keeper lives as long as the process)."""
        self._stopping.set()
        self._wake.set()
        self._announce.set()
        for thread in (self._thread, self._liveness, self._supervisor):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=10)

    def _start(self) -> None:
        # Called under self._lock.
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
            self._thread.start()
        if self._liveness is None or not self._liveness.is_alive():
            self._liveness = threading.Thread(
                target=self._liveness_loop, name="worker-liveness", daemon=True
            )
            self._liveness.start()
        if self._supervisor is None or not self._supervisor.is_alive():
            self._supervisor = threading.Thread(
                target=self._supervise, name="lease-keeper-supervisor", daemon=True
            )
            self._supervisor.start()

    def _held(self) -> list[Lease]:
        with self._lock:
            return list(self._leases.values())

    def _tick(self, leases: list[Lease]) -> float:
        # Wake often enough for the shortest interval held (tests use ~1 s).
        return max(0.05, min((lease.interval for lease in leases), default=30.0) / 4)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._renew_due(self._held())
            except Exception:
                log.exception("lease keeper error", extra={"action": "lease_keeper_error"})
            with self._lock:
                # planned under the lock :meth:`hold` adds a lease under: a lease added after
                # this is compared with this plan
                self._sleep_planned = self._tick(list(self._leases.values()))
            self._wake.wait(timeout=self._sleep_planned)
            self._wake.clear()

    def _liveness_loop(self) -> None:
        """Its own thread, so a liveness renewal that hangs never delays a lease renewal."""
        while not self._stopping.is_set():
            try:
                self._announce_due()
            except Exception:
                log.exception("lease keeper error", extra={"action": "lease_keeper_error"})
            self._mark_unbelieved(self._held())
            self._announce.wait(timeout=self._belief_tick)
            self._announce.clear()

    def _announce_due(self, force: bool = False) -> None:
        """Beat when due, or with ``force`` when the belief has lapsed — unless a beat that
        was in flight restored it meanwhile: a process that stood still (SIGSTOP, a paused
        VM) wakes with its liveness thread and a task both wanting a beat, and sends one."""
        with self._beating:
            now = self._clock()
            if force:
                if self.liveness.believed(now):
                    return
            elif (
                self._announced_at is not None
                and now - self._announced_at < self._liveness_interval
            ):
                return
            self._beat(now)

    def _beat(self, now: float) -> None:
        """Beat the liveness row of each worker id held so far. A failed beat is logged and
        retried at the next tick; the belief lasts from the start of the last one that
        committed."""
        with self._lock:
            announced = list(self._announced.items())
        if not announced:
            return
        started = self.liveness.attempting()
        ok = True
        for worker_id, engine in announced:
            try:
                with (
                    db.keeper_engine(engine).connect() as conn,
                    db.bounded(conn, db.keeper_deadline(engine, self._liveness_interval)),
                ):
                    judged = workers.beat(conn, worker_id)
                self._judged(worker_id, judged)
            except Exception:
                ok = False
                log.warning(
                    "worker liveness renewal failed",
                    exc_info=True,
                    extra={"action": "worker_liveness_failed", "worker_id": worker_id},
                )
        if ok:
            self._announced_at = now
            self.liveness.committed(started)

    def _judged(self, worker_id: str, judged_dead_at: object) -> None:
        """A beat returned the reaper's last judgement of this worker: a new one means the
        runs held then were taken, so every lease held now is lost."""
        if judged_dead_at is None or self._judged_dead_at.get(worker_id) == judged_dead_at:
            return
        self._judged_dead_at[worker_id] = judged_dead_at
        for lease in self._held():
            if lease.claim.worker_id == worker_id:
                lease.mark_lost("judged_dead", "the reaper judged this worker dead; lease lost")

    def _renew_due(self, leases: list[Lease]) -> None:
        for lease in leases:
            if lease.due(self._clock()) and not lease.renew_now():
                self.drop(lease)
            else:
                lease.arm_step_timeout_if_due()
        self._mark_overdue(leases)

    def _mark_overdue(self, leases: list[Lease]) -> None:
        now = self._clock()
        for lease in leases:
            if not lease.lost.is_set() and lease.overdue(now):
                lease.mark_lost("keeper", "lease not renewed for ttl - interval; treated as lost")
        self._mark_unbelieved(leases)

    def _mark_unbelieved(self, leases: list[Lease]) -> None:
        if self.liveness.believed():
            return
        for lease in leases:
            lease.mark_lost(
                "liveness",
                "no liveness beat committed for dead_after - margin; lease treated as lost",
            )

    def _supervise(self) -> None:
        """Replace a keeper or liveness thread that died; mark overdue leases lost if the
        keeper stalls."""
        while not self._stopping.is_set():
            leases = self._held()
            thread = self._thread
            if thread is not None:
                thread.join(timeout=min(self._tick(leases), self._belief_tick))
            if self._stopping.is_set():
                return
            with self._lock:
                if self._thread is not None and not self._thread.is_alive():
                    log.error(
                        "lease keeper thread died; starting another",
                        extra={"action": "lease_keeper_restarted"},
                    )
                    self._thread = None
                    self._start()
                if self._liveness is not None and not self._liveness.is_alive():
                    log.error(
                        "worker liveness thread died; starting another",
                        extra={"action": "lease_keeper_restarted"},
                    )
                    self._start()
            self._mark_overdue(self._held())


def _settings() -> Settings:
    """The process's settings; their defaults where the environment has none (tests that
    build a keeper without configuring a process)."""
    try:
        return get_settings()
    except ConfigError:
        return Settings()


_keeper: tuple[int, LeaseKeeper] | None = None


def keeper() -> LeaseKeeper:
    """This process's keeper (a forked child gets its own)."""
    global _keeper
    if _keeper is None or _keeper[0] != os.getpid():
        _keeper = (os.getpid(), LeaseKeeper())
    return _keeper[1]


def stop_keeper() -> None:
    """Stop this process's keeper threads, if any; the next :func:`keeper` starts afresh.
    (Tests: a keeper outliving its test would go on beating for a database that is gone.)"""
    global _keeper
    if _keeper is not None and _keeper[0] == os.getpid():
        _keeper[1].close()
    _keeper = None
