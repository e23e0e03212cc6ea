"""The heartbeat thread that keeps a claim's lease alive (ADR-114 D2: renew every 30 s)."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine

from awooop.store import runs

log = logging.getLogger("awooop.engine.lease")


class Heartbeat:
    """Renews ``claim``'s lease every ``interval`` seconds on its own connection.

    When a renewal matches no row (the reaper took the run, another worker re-claimed it),
    ``lost`` is set and renewing stops; the runner checks it and stops without writing.
    """

    def __init__(self, engine: Engine, claim: runs.Claim, lease_ttl: float, interval: float):
        self._engine = engine
        self._claim = claim
        self._lease_ttl = lease_ttl
        self._interval = interval
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._loop, name=f"heartbeat-{claim.run_id}", daemon=True
        )

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)

    def renew_now(self) -> bool:
        """Renew immediately (a long step's ``ctx.heartbeat()``); False once the lease is lost."""
        with self._lock:
            if self.lost.is_set():
                return False
            try:
                with self._engine.connect() as conn:
                    held = runs.renew(conn, self._claim, self._lease_ttl)
            except Exception:
                # A failed renewal is not a lost lease: the lease may still be ours. Retry on
                # the next beat; if the database stays away the lease expires and is reaped.
                log.warning(
                    "lease renewal failed",
                    exc_info=True,
                    extra=self._fields("lease_renew_failed"),
                )
                return True
            if not held:
                self.lost.set()
                log.warning("lease lost", extra=self._fields("lease_lost"))
            return held

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            if not self.renew_now():
                return

    def _fields(self, action: str) -> dict[str, object]:
        return {
            "action": action,
            "run_id": str(self._claim.run_id),
            "project_id": self._claim.project_id,
            "worker_id": self._claim.worker_id,
            "lease_epoch": self._claim.lease_epoch,
        }
