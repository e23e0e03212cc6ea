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
    # Orphan sweep: claimable runs whose message was sent longer ago than this get it again.
    orphan_after_seconds: float = 120.0
    orphan_interval_seconds: float = 30.0
    orphan_batch_size: int = 500
    # Dedupe rows live this long (ADR-114 risk mitigation), pruned in batches.
    dedupe_ttl_seconds: float = 7 * 24 * 3600.0
    prune_interval_seconds: float = 3600.0
    prune_batch_size: int = 5000
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
        return cls(**values)  # type: ignore[arg-type]


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
