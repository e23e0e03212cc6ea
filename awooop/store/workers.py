"""Worker liveness: the statements on ``awooop_worker``.

A worker process's lease keeper calls :func:`beat` every few seconds; the reaper
(:mod:`awooop.store.reaper`) reads each row's ``seen_at`` as a token that every beat changes,
to tell a dead worker from a slow one, and its pass calls :func:`prune`. The runs API's
workers list reads them with :func:`list_for_project`.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, text

# ON CONFLICT DO UPDATE works on the row's latest version: a reaper's judgement (a stamp
# in judged_dead_at) that committed first is returned; one that comes after finds seen_at
# changed and judges nothing (its compare-and-set on the token fails).
_BEAT = text(
    """
INSERT INTO awooop_worker (worker_id, host, pid)
VALUES (:worker_id, :host, :pid)
ON CONFLICT (worker_id) DO UPDATE SET seen_at = now()
RETURNING judged_dead_at
"""
)


def beat(
    conn: Connection, worker_id: str, host: str | None = None, pid: int | None = None
) -> datetime | None:
    """``worker_id`` is alive now: insert its row, or set ``seen_at = now()``. Returns when
    the reaper last judged it dead (and took its runs), or None if it never did."""
    row = conn.execute(
        _BEAT,
        {
            "worker_id": worker_id,
            "host": (host if host is not None else socket.gethostname())[:64],
            "pid": pid if pid is not None else os.getpid(),
        },
    ).one()
    judged_dead_at: datetime | None = row.judged_dead_at
    return judged_dead_at


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


# Every worker row (workers serve every project), with the RUNNING runs of one project each
# holds — the holder as the reaper and prune see it. The runs joined are that project's
# RUNNING ones only (ix_awooop_run_state_project_status serves them).
_LIST_FOR_PROJECT = text(
    """
SELECT w.worker_id, w.host, w.pid, w.started_at, w.seen_at,
       CAST(greatest(extract(epoch FROM now() - w.seen_at), 0) AS double precision)
           AS seen_seconds_ago,
       w.judged_dead_at, count(r.run_id) AS runs_held
FROM awooop_worker w
LEFT JOIN awooop_run_state r
       ON r.worker_id = w.worker_id AND r.project_id = :project_id AND r.status = 'RUNNING'
GROUP BY w.worker_id
ORDER BY w.host, w.started_at, w.worker_id
"""
)


def list_for_project(conn: Connection, project_id: str) -> list[dict[str, Any]]:
    """The workers the system knows (a row each, alive or not yet pruned), by host then
    start, each with how many of ``project_id``'s RUNNING runs it holds."""
    rows = conn.execute(_LIST_FOR_PROJECT, {"project_id": project_id}).mappings()
    return [dict(r) for r in rows]
