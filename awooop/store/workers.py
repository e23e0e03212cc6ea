"""Worker liveness (DESIGN §9.5): the statements on ``awooop_worker``.

A worker process's lease keeper calls :func:`beat` every few seconds; the reaper
(:mod:`awooop.store.reaper`) reads the rows to tell a dead worker from a slow one, and its
pass calls :func:`prune`. All times are the database's ``now()``.
"""

from __future__ import annotations

import os
import socket

from sqlalchemy import Connection, text

_BEAT = text(
    """
INSERT INTO awooop_worker (worker_id, host, pid)
VALUES (:worker_id, :host, :pid)
ON CONFLICT (worker_id) DO UPDATE SET seen_at = now()
"""
)


def beat(conn: Connection, worker_id: str, host: str | None = None, pid: int | None = None) -> None:
    """``worker_id`` is alive now: insert its row, or set ``seen_at = now()``."""
    conn.execute(
        _BEAT,
        {
            "worker_id": worker_id,
            "host": (host if host is not None else socket.gethostname())[:64],
            "pid": pid if pid is not None else os.getpid(),
        },
    )


# A worker still named as the holder of a RUNNING run keeps its row: the reaper decides
# about those runs (and the lease does, should the reaper not have).
_PRUNE = text(
    """
DELETE FROM awooop_worker w
WHERE w.seen_at < now() - make_interval(secs => :older_than)
  AND NOT EXISTS (
      SELECT 1 FROM awooop_run_state r
      WHERE r.status = 'RUNNING' AND r.worker_id = w.worker_id
  )
"""
)


def prune(conn: Connection, older_than: float) -> int:
    """Delete the rows of workers not seen for ``older_than`` seconds; returns how many."""
    return int(conn.execute(_PRUNE, {"older_than": older_than}).rowcount)
