"""Prometheus metrics: what each process counts, and what ``/metrics`` serves.

Two kinds of numbers, gathered two ways:

* **Events counted by the process that saw them** — admissions (web), claims, lease
  renewals and step durations (workers), reaper recoveries and timer lateness (the
  maintenance worker). gunicorn runs several web processes and Celery forks pool children,
  so these use prometheus_client's multiprocess mode: with ``PROMETHEUS_MULTIPROC_DIR`` set,
  every process writes its counters to memory-mapped files in that directory and the web
  ``/metrics`` sums the files of all of them, including the Celery workers' — **provided
  they share the directory, i.e. run on one host** (``make run``, a single VM, one pod with
  several containers sharing a volume). Empty the directory before the processes start
  (``awooop metrics reset``): counters then restart from zero, which Prometheus handles as
  a counter reset. Without the variable each process keeps its own numbers and ``/metrics``
  shows only the web process that answered the scrape.
* **State read from the database at scrape time** — unfinished runs by status and the
  outbox backlog. PostgreSQL is the source of truth, so these are right whichever process or
  host serves the scrape and need no cooperation from the workers; the queries run only when
  Prometheus scrapes, never on the admission or claim path, and read partial indexes whose
  size is the work in flight (unfinished runs, PENDING or PARKED messages), not the history
  kept. Finished runs are counted where they finish (``awooop_runs_finished_total``): a count
  of the finished rows kept would grow with the retention period and drop at each sweep.

Labels are low-cardinality by construction: channel, result, outcome, status, timer kind,
workflow and step names (a deployment's fixed set). Never a run id, project id or worker id.

Incrementing a counter is a lock and a write to a memory-mapped file: no I/O, no round trip.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from awooop import config, db
from awooop.domain import states
from awooop.store import monitoring

log = logging.getLogger("awooop.metrics")

_DIR = config.metrics_dir()
if _DIR:
    # Metric files are opened as metrics are created, just below.
    os.makedirs(_DIR, exist_ok=True)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# --- counted where it happens ---------------------------------------------------------

ADMISSIONS = Counter(
    "awooop_admissions_total",
    "Channel events received, by channel and result: created (a new run), duplicate (the "
    "run of an earlier copy returned), key_reused (same key, another body: 422), ignored "
    "(no workflow routed), unauthenticated (401), forbidden (a viewer token: 403), "
    "rate_limited (429 E-RATE-001), over_quota (429 E-QUOTA-001).",
    ["channel", "result"],
)
CLAIM_LATENCY = Histogram(
    "awooop_claim_latency_seconds",
    "From a run's message being sent (or its retry falling due) to a worker claiming it, "
    "by the database clock.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
LEASE_RENEWALS = Counter(
    "awooop_lease_renewals_total",
    "Lease heartbeats by outcome: renewed; lost (matched no row: reaped or re-claimed); "
    "error (the database did not answer; retried at the next beat).",
    ["outcome"],
)
LEASE_LOSSES = Counter(
    "awooop_lease_losses_total",
    "Leases a worker found gone, by where it noticed: renewal (a heartbeat matched no row) "
    "or write (a fenced write matched no row). The worker stopped without writing.",
    ["detected_by"],
)
REAPER_RECOVERIES = Counter(
    "awooop_reaper_recoveries_total",
    "RUNNING runs with an expired lease taken back by the reaper: requeued (back to "
    "PENDING) or failed (attempts exhausted).",
    ["outcome"],
)
TIMER_LATENESS = Histogram(
    "awooop_timer_lateness_seconds",
    "How long after its due time the sweep fired a timer, by timer kind.",
    ["kind"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900),
)
STEP_DURATION = Histogram(
    "awooop_step_duration_seconds",
    "Step handler run time, by workflow, step, phase (forward, compensate, resolve) and the "
    "status the attempt recorded.",
    ["workflow", "step", "phase", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
RUNS_FINISHED = Counter(
    "awooop_runs_finished_total",
    "Runs that reached a final status, counted by the process that committed the move: "
    "COMPLETED, FAILED or CANCELLED (workers; the reaper's exhausted budget; an operator's "
    "manual close).",
    ["status"],
)
RETENTION_DELETED = Counter(
    "awooop_retention_deleted_rows_total",
    "Rows the retention sweep deleted, by table: finished runs past their retention with "
    "their events, timers, approvals, inbox and dedupe rows, and SENT / PARKED outbox rows "
    "past theirs.",
    ["table"],
)
RUN_SEGMENTS = Counter(
    "awooop_run_segments_total",
    "Run messages a worker handled, by how the segment ended: completed, failed, cancelled, "
    "retry_scheduled, waiting_tool, resolving, escalated, paused, lease_lost, released, "
    "not_claimed (a duplicate or stale nudge).",
    ["outcome"],
)


# --- read from the database at scrape time --------------------------------------------


class DatabaseCollector(Collector):
    """Gauges computed from PostgreSQL when Prometheus scrapes."""

    def __init__(self, engine: Engine, timeout_seconds: float) -> None:
        self._engine = engine
        self._timeout = timeout_seconds

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "awooop_metrics_database_up",
            "1 when the database gauges below could be read at this scrape, else 0.",
        )
        try:
            with db.transaction(self._engine) as conn:
                snap = monitoring.snapshot(conn, self._timeout)
        except SQLAlchemyError as exc:
            log.warning(
                "could not read database gauges",
                extra={"action": "metrics_database_failed", "error": type(exc).__name__},
            )
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        runs = GaugeMetricFamily(
            "awooop_runs",
            "Unfinished runs by status, read from the database. Finished runs are counted "
            "by awooop_runs_finished_total (and deleted after their retention).",
            labels=["status"],
        )
        for status in states.UNFINISHED_STATUSES:
            runs.add_metric([status], snap.runs_by_status.get(status, 0))
        yield runs
        if snap.outbox is not None:
            yield GaugeMetricFamily(
                "awooop_outbox_backlog",
                "Outbound messages waiting to be sent (PENDING).",
                value=snap.outbox.pending,
            )
            yield GaugeMetricFamily(
                "awooop_outbox_parked",
                "Outbound messages given up on after their retries (PARKED).",
                value=snap.outbox.parked,
            )
            yield GaugeMetricFamily(
                "awooop_outbox_oldest_pending_age_seconds",
                "Age of the oldest PENDING outbound message (0 when none).",
                value=snap.outbox.oldest_pending_age_seconds,
            )


def render(engine: Engine, timeout_seconds: float) -> bytes:
    """The exposition text ``/metrics`` answers with."""
    registry = CollectorRegistry(auto_describe=False)
    if config.metrics_dir():
        MultiProcessCollector(registry)
    else:
        # One process: its own counters (and prometheus_client's process metrics).
        registry.register(REGISTRY)
    registry.register(DatabaseCollector(engine, timeout_seconds))
    return generate_latest(registry)


def reset(directory: str | Path) -> int:
    """Delete the metric files in ``directory`` (before the processes start); returns how many.

    Only prometheus_client's ``*.db`` files are removed, so a mistaken path loses nothing else.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    removed = 0
    for file in path.glob("*.db"):
        file.unlink(missing_ok=True)
        removed += 1
    return removed
