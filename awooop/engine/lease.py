"""Keeping leases alive (ADR-114 D2: renew every 30 s), one thread per process.

A worker process holds one lease per run it executes. Each :class:`Lease` is registered with
the process's :class:`LeaseKeeper`, whose single daemon thread renews every lease that is due;
starting a thread per run would cost more than a short run's whole execution.

When a renewal matches no row (the reaper took the run, another worker re-claimed it) the
lease's ``lost`` event is set and it is dropped; the runner checks ``lost`` and stops
without writing.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from sqlalchemy import Engine

from awooop import metrics
from awooop.store import leases

log = logging.getLogger("awooop.engine.lease")


class Lease:
    def __init__(self, engine: Engine, claim: leases.Claim, ttl: float, interval: float) -> None:
        self.claim = claim
        self.ttl = ttl
        self.interval = interval
        self.lost = threading.Event()
        self._engine = engine
        self._lock = threading.Lock()
        self._renewed_at = time.monotonic()

    def due(self, now: float) -> bool:
        return now - self._renewed_at >= self.interval

    def renew_now(self) -> bool:
        """Renew immediately (a long step's ``ctx.heartbeat()``); False once the lease is lost."""
        with self._lock:
            if self.lost.is_set():
                return False
            try:
                with self._engine.connect() as conn:
                    held = leases.renew(conn, self.claim, self.ttl)
            except Exception:
                # A failed renewal is not a lost lease: the lease may still be ours. Retry on
                # the next beat; if the database stays away the lease expires and is reaped.
                metrics.LEASE_RENEWALS.labels("error").inc()
                log.warning(
                    "lease renewal failed", exc_info=True, extra=self._fields("lease_renew_failed")
                )
                return True
            self._renewed_at = time.monotonic()
            if not held:
                self.lost.set()
                metrics.LEASE_RENEWALS.labels("lost").inc()
                metrics.LEASE_LOSSES.labels("renewal").inc()
                log.warning("lease lost", extra=self._fields("lease_lost"))
            else:
                metrics.LEASE_RENEWALS.labels("renewed").inc()
            return held

    def _fields(self, action: str) -> dict[str, object]:
        return {
            "action": action,
            "run_id": str(self.claim.run_id),
            "project_id": self.claim.project_id,
            "worker_id": self.claim.worker_id,
            "lease_epoch": self.claim.lease_epoch,
        }


class LeaseKeeper:
    """The process's renewal thread, started on first use."""

    def __init__(self) -> None:
        self._leases: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._leases[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
                self._thread.start()
        self._wake.set()  # re-plan the sleep for the new lease's interval

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._leases.pop(id(lease), None)

    def _loop(self) -> None:
        while True:
            with self._lock:
                leases = list(self._leases.values())
            now = time.monotonic()
            for lease in leases:
                if lease.due(now) and not lease.renew_now():
                    self.drop(lease)
            # Wake often enough for the shortest interval held (tests use ~1 s).
            tick = min((lease.interval for lease in leases), default=30.0) / 4
            self._wake.wait(timeout=max(0.05, tick))
            self._wake.clear()


_keeper: tuple[int, LeaseKeeper] | None = None


def keeper() -> LeaseKeeper:
    """This process's keeper (a forked child gets its own)."""
    global _keeper
    if _keeper is None or _keeper[0] != os.getpid():
        _keeper = (os.getpid(), LeaseKeeper())
    return _keeper[1]
