"""Every knob AwoooP has, read once from ``AWOOOP_*`` environment variables.

Nothing else in the package reads the environment. Defaults are the ADR-114 values
(5-minute lease, 30-second heartbeat, 60-second reaper, 7-day dedupe TTL); tests and
benchmarks shorten them through the same variables.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from awooop.domain import workflow

# Where the embedded development services keep their data and the state file
# (`.awooop/env`) that every process started by `make run` reads.
STATE_DIR = Path(os.environ.get("AWOOOP_STATE_DIR", Path.cwd() / ".awooop"))


class ConfigError(RuntimeError):
    """The configuration is incomplete or invalid; the message says which variable."""


@dataclass(frozen=True)
class Settings:
    database_url: str = ""
    broker_url: str = ""
    secret_key: str = ""
    port: int = 8000
    web_workers: int = 4
    web_threads: int = 4
    # "1": gunicorn access log on stdout (paths only: no query strings, no headers).
    access_log: int = 1
    # Lease protocol (ADR-114 D2/D3).
    lease_ttl_seconds: float = 300.0
    heartbeat_interval_seconds: float = 30.0
    reaper_interval_seconds: float = 60.0
    # Worker liveness (DESIGN §9.5): each worker process's lease keeper renews its row in
    # awooop_worker every liveness interval; the reaper takes the RUNNING runs of a worker not
    # seen for dead_after seconds without waiting for their leases. A dead worker's runs are
    # claimable again within dead_after + reaper_interval (80 s by default). Rows of workers
    # not seen for worker_prune_after_seconds are deleted by the reaper's pass.
    worker_liveness_interval_seconds: float = 5.0
    worker_dead_after_seconds: float = 20.0
    worker_prune_after_seconds: float = 3600.0
    # Orphan sweep: claimable runs whose message was sent longer ago than this get it again.
    orphan_after_seconds: float = 120.0
    orphan_interval_seconds: float = 30.0
    orphan_batch_size: int = 500
    # Dedupe rows live this long (ADR-114 risk mitigation), pruned in batches.
    dedupe_ttl_seconds: float = 7 * 24 * 3600.0
    prune_interval_seconds: float = 300.0
    prune_batch_size: int = 5000
    # Retention: finished runs (COMPLETED / FAILED / CANCELLED) are deleted, with their
    # events, timers, approvals, inbox and dedupe rows, once they finished this many days ago
    # (a project may set its own: `awooop project retention`) and their dedupe row has
    # expired; SENT and PARKED outbox messages once created this many days ago. The sweep
    # runs every interval and deletes at most batch_size runs (or messages) per transaction.
    run_retention_days: float = 30.0
    outbox_retention_days: float = 30.0
    retention_interval_seconds: float = 300.0
    retention_batch_size: int = 500
    # A deleting pass (retention, dedupe prune) stops starting batches after this long; the
    # rest waits for its next pass, so a backlog never holds the one maintenance worker (and
    # the timers and reaper behind it) for more than about this long.
    sweep_pass_seconds: float = 10.0
    # Operators may close a run stuck in manual intervention without compensating ("1").
    manual_close_enabled: int = 0
    # Per-project quotas and rate limits are set per project (`awooop project limits`).
    # Retry-After sent with a 429 E-QUOTA-001 (active-run quota reached).
    quota_retry_after_seconds: int = 30
    # The Redis counting rate-limit windows (default: the broker, when it is Redis). When it
    # is unreachable, requests are allowed and it is not asked again for retry_seconds.
    rate_limit_redis_url: str = ""
    rate_limit_timeout_seconds: float = 0.25
    rate_limit_retry_seconds: float = 10.0
    # The due-timer sweep (retry wake-ups; step, tool and approval timeouts).
    timer_interval_seconds: float = 2.0
    timer_batch_size: int = 500
    max_body_bytes: int = 1024 * 1024
    # Outbound messages (the outbox): provider endpoints, and how hard to try. A message
    # still failing after outbox_max_attempts sends is parked (kept, visible, not retried).
    telegram_api_base: str = "https://api.telegram.org"
    line_api_base: str = "https://api.line.me"
    outbox_max_attempts: int = 8
    outbox_base_delay_seconds: float = 2.0
    outbox_max_delay_seconds: float = 300.0
    # Each socket read of a provider call, and a deadline on the whole send (outbound.transport).
    outbox_send_timeout_seconds: float = 10.0
    outbox_interval_seconds: float = 2.0
    outbox_batch_size: int = 200
    # This deployment's public address (e.g. https://awooop.example.com), used in links sent
    # out (the approval URL in a webhook); empty: links are left out.
    public_base_url: str = ""
    # How long an ops console sign-in lasts without a request. Its cookie is marked Secure when
    # public_base_url is https.
    console_session_seconds: float = 8 * 3600.0
    # How long a web process reuses a project's routes and credential hashes (0: never).
    # Revoked credentials and changed routes take effect within this many seconds.
    auth_cache_seconds: float = 5.0
    db_pool_size: int = 5
    # Database sessions per process role (web, worker, keeper, sweeps): the server cancels a
    # statement running longer than statement_timeout, or waiting for a lock longer than
    # lock_timeout. The keeper renews leases on its own small pool, and gives up on a renewal
    # after min(its statement timeout, AWOOOP_HEARTBEAT_INTERVAL_SECONDS / 2) even when the
    # server cannot answer (a half-open connection), then retries on a fresh connection.
    db_statement_timeout_web_seconds: float = 15.0
    db_statement_timeout_worker_seconds: float = 30.0
    db_statement_timeout_keeper_seconds: float = 5.0
    db_statement_timeout_sweeps_seconds: float = 60.0
    db_lock_timeout_web_seconds: float = 5.0
    db_lock_timeout_worker_seconds: float = 10.0
    db_lock_timeout_keeper_seconds: float = 2.0
    db_lock_timeout_sweeps_seconds: float = 10.0
    db_keeper_pool_size: int = 2
    # TCP keepalives on every database connection (libpq keepalives_*), and how long data may
    # stay unacknowledged before the connection is dropped (libpq tcp_user_timeout): a dead
    # peer is noticed in about idle + interval * count seconds.
    db_keepalives_idle_seconds: int = 15
    db_keepalives_interval_seconds: int = 5
    db_keepalives_count: int = 3
    db_tcp_user_timeout_seconds: float = 30.0
    # A worker's fenced write that fails on a transient database error (connection reset,
    # serialization failure, statement or lock timeout) is tried again this many times, after
    # a jittered exponential back-off from base up to max; then the run is handed back.
    write_retries: int = 4
    write_retry_base_seconds: float = 0.1
    write_retry_max_seconds: float = 2.0
    log_level: str = "INFO"
    # /readyz: how long each dependency check (database, broker) may take before it fails.
    readiness_timeout_seconds: float = 2.0
    # /metrics: statement timeout of the gauges read from the database at scrape time.
    metrics_query_timeout_seconds: float = 2.0
    # Celery task events for Flower ("1"); "0" saves about 0.8 ms of worker CPU per run.
    task_events: int = 1
    # Comma-separated modules that register deployment workflows at process start.
    workflow_modules: str = ""
    beat_schedule_file: str = str(STATE_DIR / "celerybeat-schedule")

    @property
    def rate_limit_url(self) -> str:
        return self.rate_limit_redis_url or self.broker_url

    @property
    def workflow_module_list(self) -> list[str]:
        return [m.strip() for m in self.workflow_modules.split(",") if m.strip()]

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        required: tuple[str, ...] = ("database_url", "broker_url", "secret_key"),
    ) -> Settings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"AWOOOP_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            try:
                if f.type in ("int", int):
                    values[f.name] = int(raw)
                elif f.type in ("float", float):
                    values[f.name] = float(raw)
                else:
                    values[f.name] = raw
            except ValueError as exc:
                raise ConfigError(f"AWOOOP_{f.name.upper()}={raw!r} is not a number") from exc
        for name in required:
            if name not in values:
                raise ConfigError(
                    f"AWOOOP_{name.upper()} is not set. For development run `make run` "
                    f"(it starts embedded services and writes {STATE_DIR / 'env'}), "
                    "or export the variable."
                )
        settings = cls(**values)  # type: ignore[arg-type]
        check_lease_timing(settings)
        return settings

    def statement_timeout(self, role: str) -> float:
        """``AWOOOP_DB_STATEMENT_TIMEOUT_<ROLE>_SECONDS``."""
        return float(getattr(self, f"db_statement_timeout_{role}_seconds"))

    def lock_timeout(self, role: str) -> float:
        """``AWOOOP_DB_LOCK_TIMEOUT_<ROLE>_SECONDS``."""
        return float(getattr(self, f"db_lock_timeout_{role}_seconds"))


def check_lease_timing(settings: Settings) -> None:
    """Refuse a renewal interval longer than a third of the lease TTL: a lease is renewed at
    least ``RENEWALS_PER_TTL`` times per TTL, so one or two failed renewals (a database
    hiccup, a dropped connection) do not lose it (DESIGN §9.5). The same holds for a worker's
    liveness row and the age at which the reaper judges its worker dead."""
    interval, ttl = settings.heartbeat_interval_seconds, settings.lease_ttl_seconds
    most = ttl / workflow.RENEWALS_PER_TTL
    if not workflow.renewals_fit(ttl, interval):
        raise ConfigError(
            f"AWOOOP_HEARTBEAT_INTERVAL_SECONDS={interval:g} must be positive and at most a "
            f"third of AWOOOP_LEASE_TTL_SECONDS={ttl:g} (at most {most:g}): "
            "a lease must survive two failed renewals"
        )
    every, dead_after = (
        settings.worker_liveness_interval_seconds,
        settings.worker_dead_after_seconds,
    )
    if every <= 0 or dead_after < workflow.RENEWALS_PER_TTL * every:
        raise ConfigError(
            f"AWOOOP_WORKER_DEAD_AFTER_SECONDS={dead_after:g} must be at least "
            f"{workflow.RENEWALS_PER_TTL} times AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS={every:g} "
            f"(at least {workflow.RENEWALS_PER_TTL * every:g}, the interval positive): "
            "a live worker must survive two failed liveness renewals"
        )


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, read on first use."""
    return Settings.from_env()


def metrics_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR``: where every process writes its metric files (see
    :mod:`awooop.metrics`). prometheus_client reads this variable itself when it is imported,
    so it keeps its own name rather than an ``AWOOOP_`` one; None when unset or empty.
    """
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def database_url() -> str:
    """Just the database URL (migrations need nothing else)."""
    return Settings.from_env(required=("database_url",)).database_url
