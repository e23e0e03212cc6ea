"""Prometheus metrics: what each process counts, and what ``/metrics`` serves.

Two kinds of numbers, gathered two ways:

* **Events counted by the process that saw them** — admissions and HTTP answers (web),
  claims, lease renewals and step durations (workers), sweep passes, reaper recoveries and
  timer lateness (the maintenance worker), schedule entries sent (beat). gunicorn runs
  several web processes and Celery forks pool children, so these use prometheus_client's
  multiprocess mode: with ``PROMETHEUS_MULTIPROC_DIR`` set, every process writes its
  counters to memory-mapped files in that directory, and whoever serves the directory sums
  the files of all of them. Two ways to serve them (see :mod:`awooop.metric_files`):

  - **one host**: web, workers and beat share the directory and the web ``/metrics`` sums
    them all, the Celery processes' included (``make run``, a single VM, one pod with
    several containers sharing a volume). Empty it before the processes start
    (``awooop metrics reset``).
  - **several hosts**: each worker and beat serves its own directory on its own port
    (``AWOOOP_METRICS_PORT``, :mod:`awooop.exporter`) and empties it when it starts; the
    web's ``/metrics`` then serves the web's counters and the database gauges.

  Counters restart from zero with their processes, which Prometheus handles as a counter
  reset. Without the variable each process keeps its own numbers and ``/metrics`` shows only
  the web process that answered the scrape.
* **State read from the database at scrape time** — unfinished runs by status, the
  intervention queue, how long the stillest RUNNING run has gone without progress, and the
  outbox backlog. PostgreSQL is the source of truth, so these are
  right whichever process or host serves the scrape and need no cooperation from the
  workers; the queries run only when Prometheus scrapes, never on the admission or claim
  path, and read partial indexes whose
  size is the work in flight (unfinished runs, PENDING or PARKED messages), not the history
  kept. Finished runs are counted where they finish (``awooop_runs_finished_total``): a count
  of the finished rows kept would grow with the retention period and drop at each sweep.

Labels are low-cardinality by construction: channel, result, outcome, status, timer kind,
workflow, step, sweep and task names, Flask endpoint names and HTTP status codes (a
deployment's fixed set). Never a run id, project id, worker id or URL path. The label
functions below (:func:`workflow_label`, :func:`failure_code_label`, :func:`route_label`,
:func:`status_class`, :func:`channel_label`) fold anything outside a fixed set into one
value, so a bad input cannot grow a series.

Incrementing a counter is a lock and a write to a memory-mapped file: no I/O, no round trip.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Iterable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from awooop import __version__, config, db, errors
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
    "run of an earlier copy returned), signalled (delivered to an open run by correlation), "
    "key_reused (same key, another body: 422), ignored "
    "(no workflow routed), unauthenticated (401), forbidden (a viewer token: 403), "
    "rate_limited (429 E-RATE-001), over_quota (429 E-QUOTA-001); for the schedule channel, "
    "skipped (a tick found too late to start, counted once per process).",
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
    "Leases a worker found gone, by where it noticed: renewal (a heartbeat matched no row), "
    "write (a fenced write matched no row), keeper (not renewed within ttl - interval), "
    "liveness (no liveness beat committed within dead_after - margin) or judged_dead (a beat "
    "learnt that the reaper had judged the worker dead). The worker stopped without writing.",
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
    "retry_scheduled, waiting_tool, waiting (a sleep or a wait for a signal), woken (a wait "
    "whose signal was already there), resolving, escalated, paused, lease_lost, released, "
    "handed_back (an operator's intent or the deadline met the run's last write: sent again), "
    "not_claimed (a duplicate or stale nudge), database_unreachable (the claim's database did "
    "not answer: sent again).",
    ["outcome"],
)
SIGNALS = Counter(
    "awooop_signals_total",
    "Signals sent to runs, by outcome: delivered (the run waited for it), kept (for a step "
    "to come), duplicate, conflict (an id reused), finished (409), full (409), no_run (404).",
    ["outcome"],
)
WORKFLOW_UNAVAILABLE = Counter(
    "awooop_workflow_unavailable_total",
    "Runs a worker claimed but could not run, because no definition of their workflow with "
    "their version and digest is registered in it, by workflow, version and outcome: "
    "released (handed back, to be claimed again within a minute) or failed (E-RUN-003: "
    "handed back for AWOOOP_WORKFLOW_UNAVAILABLE_FAIL_AFTER_SECONDS).",
    ["workflow", "version", "outcome"],
)
HTTP_RESPONSES = Counter(
    "awooop_http_responses_total",
    "HTTP answers of the web process, by Flask endpoint (ingress.webhook, ingress.create_run, "
    "runs_api.…; 'unmatched' for an unknown path) and status code.",
    ["endpoint", "code"],
)
SWEEP_PASSES = Counter(
    "awooop_sweep_passes_total",
    "Maintenance task runs, by sweep (reap, fire_due_timers, resend_orphans, "
    "send_due_notifications, prune_dedupe, …) and outcome: succeeded, failed (raised; the "
    "next scheduled pass tries again), expired (not started before the next one was due).",
    ["sweep", "outcome"],
)
SWEEP_OUTCOMES = ("succeeded", "failed", "expired")
PROJECT_AUTH_LOADS = Counter(
    "awooop_project_auth_loads_total",
    "Reads of a project's routes and credential hashes from the database by a web "
    "process's auth cache (a miss, or an entry older than AWOOOP_AUTH_CACHE_SECONDS); each "
    "read is one statement, one transaction.",
)
BEAT_SENT = Counter(
    "awooop_beat_sent_total",
    "Schedule entries beat sent to the broker, by task name.",
    ["task"],
)

RUN_DURATION = Histogram(
    "awooop_run_duration_seconds",
    "From a run's admission to its final status, by workflow and status (COMPLETED, FAILED, "
    "CANCELLED); observed by the worker (or the reaper) that committed the final move.",
    ["workflow", "status"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, 604800),
)
RUN_FAILURES = Counter(
    "awooop_run_failures_total",
    "Runs that ended FAILED, by workflow and failure code (the run failure codes of "
    "awooop.errors.RUN_FAILURE_CODES; 'other' for any other value).",
    ["workflow", "failure_code"],
)
APPROVAL_WAIT = Histogram(
    "awooop_approval_wait_seconds",
    "From an approval being requested to its decision, by decision: approved, rejected "
    "(a person, through the API or a chat button) or expired (its TTL passed).",
    ["decision"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400),
)
APPROVAL_DECISIONS = ("approved", "rejected", "expired")
OUTBOUND_SENDS = Counter(
    "awooop_outbound_sends_total",
    "Outbound messages sent to a provider, by channel (telegram, line, gitea, webhook; "
    "'other') and result: sent (a 2xx answer), retry (a transient failure: due again after "
    "a back-off) or parked (a permanent failure, or the last attempt).",
    ["channel", "result"],
)
OUTBOUND_RESULTS = ("sent", "retry", "parked")
HTTP_REQUEST_DURATION = Histogram(
    "awooop_http_request_duration_seconds",
    "Time the web process took to answer a request, by route (the Flask URL rule, e.g. "
    "/v1/projects/<project_id>/runs/<run_id>; 'unmatched' for an unknown path) and status "
    "class (2xx, 3xx, 4xx, 5xx).",
    ["route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RETENTION_PASSES = Counter(
    "awooop_retention_passes_total",
    "Retention sweep passes, by result: caught_up (nothing past its retention was left) or "
    "behind (the pass ran out of AWOOOP_SWEEP_PASS_SECONDS with rows still due).",
    ["result"],
)
BUILD_INFO = Gauge(
    "awooop_build_info",
    "Always 1: the AwoooP version and the Python version the process runs.",
    ["version", "python"],
    multiprocess_mode="max",
)
BUILD_INFO.labels(__version__, platform.python_version()).set(1)

# --- bounded labels -----------------------------------------------------------------------

UNREGISTERED_WORKFLOW = "unregistered"
OTHER = "other"
UNMATCHED_ROUTE = "unmatched"
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
OUTBOUND_CHANNELS = ("telegram", "line", "gitea", "webhook")


def workflow_label(name: str) -> str:
    """``name`` when a workflow of that name is registered in this process, else
    ``unregistered``: the label's values are the deployment's workflows plus one."""
    from awooop.workflows import registry  # the registry imports handlers; metrics must not

    return name if registry.latest(name) is not None else UNREGISTERED_WORKFLOW


def failure_code_label(code: str | None) -> str:
    """A run failure code of the catalogue, else ``other``."""
    return code if code in errors.RUN_FAILURE_CODES else OTHER


def route_label(rule: str | None) -> str:
    """The Flask URL rule a request matched (its template, never the path), else
    ``unmatched``."""
    return rule or UNMATCHED_ROUTE


def status_class(code: int) -> str:
    """``2xx`` for 200–299 and so on; ``other`` outside 100–599."""
    return f"{code // 100}xx" if 100 <= code <= 599 else OTHER


def channel_label(channel: str) -> str:
    """An outbound channel AwoooP has an adapter for, else ``other``."""
    return channel if channel in OUTBOUND_CHANNELS else OTHER


def run_finished(workflow: str, status: str, failure_code: str | None, seconds: float) -> None:
    """A run reached its final ``status`` ``seconds`` after its admission: its duration,
    and its failure when it failed."""
    label = workflow_label(workflow)
    RUN_DURATION.labels(label, status).observe(max(0.0, seconds))
    if status == states.FAILED:
        RUN_FAILURES.labels(label, failure_code_label(failure_code)).inc()


def zero_known_series(sweeps: Iterable[str] = ()) -> None:
    """Create the worker counters' known label sets at 0, so the first increment is a
    change Prometheus can see (``increase()`` never sees a series appear at 1)."""
    for outcome in ("renewed", "lost", "error"):
        LEASE_RENEWALS.labels(outcome)
    for detected_by in ("renewal", "write", "keeper", "liveness", "judged_dead"):
        LEASE_LOSSES.labels(detected_by)
    for outcome in ("requeued", "failed"):
        REAPER_RECOVERIES.labels(outcome)
    for sweep in sweeps:
        for outcome in SWEEP_OUTCOMES:
            SWEEP_PASSES.labels(sweep, outcome)
    for channel in OUTBOUND_CHANNELS:
        for result in OUTBOUND_RESULTS:
            OUTBOUND_SENDS.labels(channel, result)
    for result in ("caught_up", "behind"):
        RETENTION_PASSES.labels(result)


# --- read from the database at scrape time --------------------------------------------


class DatabaseCollector(Collector):
    """Gauges computed from PostgreSQL when Prometheus scrapes."""

    def __init__(self, engine: Engine, timeout_seconds: float) -> None:
        self._engine = engine
        self._timeout = timeout_seconds

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` may yield (names and types, no samples)."""
        yield GaugeMetricFamily("awooop_metrics_database_up", "")
        yield GaugeMetricFamily("awooop_runs", "", labels=["status"])
        yield GaugeMetricFamily("awooop_interventions", "")
        yield GaugeMetricFamily("awooop_running_oldest_progress_age_seconds", "")
        yield GaugeMetricFamily("awooop_outbox_backlog", "")
        yield GaugeMetricFamily("awooop_outbox_parked", "")
        yield GaugeMetricFamily("awooop_outbox_oldest_pending_age_seconds", "")
        yield GaugeMetricFamily("awooop_approvals_waiting", "")
        yield GaugeMetricFamily("awooop_approval_soonest_expiry_seconds", "")

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "awooop_metrics_database_up",
            "1 when the database gauges below could be read at this scrape, else 0.",
        )
        try:
            with db.transaction(self._engine) as conn:
                snap = monitoring.snapshot(conn, self._timeout)
                interventions = monitoring.interventions(conn)
                stalled_for = monitoring.oldest_running_progress_age(conn)
                approvals = monitoring.approvals_waiting(conn)
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
        yield GaugeMetricFamily(
            "awooop_interventions",
            "Runs waiting for a person (saga MANUAL_INTERVENTION), read from the database.",
            value=interventions,
        )
        yield GaugeMetricFamily(
            "awooop_running_oldest_progress_age_seconds",
            "Seconds since the RUNNING run that has gone longest without progress was claimed, "
            "recorded a step or changed state (lease renewals are not progress); 0 when no run "
            "is RUNNING. A handler that never returns keeps it growing until its step timeout "
            "(AWOOOP_STEP_TIMEOUT_SECONDS, or the step's own) takes the run.",
            value=stalled_for,
        )
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
        yield GaugeMetricFamily(
            "awooop_approvals_waiting",
            "Approvals (of approval steps) waiting for a person's decision, read from the "
            "database.",
            value=approvals.count,
        )
        soonest = GaugeMetricFamily(
            "awooop_approval_soonest_expiry_seconds",
            "Seconds until the first approval waiting for a decision expires (0 once due); no "
            "sample when none waits.",
        )
        if approvals.soonest_expiry_seconds is not None:
            soonest.add_metric([], approvals.soonest_expiry_seconds)
        yield soonest


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
