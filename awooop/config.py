"""Every knob AwoooP has, read once from ``AWOOOP_*`` environment variables.

Nothing else in the package reads the environment. Defaults are the production values
(5-minute lease, 30-second heartbeat, 60-second reaper, 7-day dedupe TTL); tests and
benchmarks shorten them through the same variables.

Settings are checked when they are read (:meth:`Settings.from_env`): every number parses and
is in range, booleans are booleans, URLs parse (the database URL names a supported driver,
the broker URL a supported transport), and the timings keep their relations (a lease renewed
at least three times per TTL, the reaper passing within a lease). Every problem is reported
at once, on one line, naming the variable; a starting process (web, worker, beat) prints it
and exits with status 2 (:func:`awooop.bootstrap.settings_or_exit`), the ``awooop`` command
likewise. What a process checks beyond the values when it starts (its workflow modules import,
every workflow's lease fits) is in :mod:`awooop.bootstrap`, so reading settings imports no
workflow.

Secrets never leave this module in clear: ``repr(settings)``, :meth:`Settings.masked` (what
``awooop config`` prints and the start-up log line shows) and every error message mask URL
passwords (SQLAlchemy's ``render_as_string(hide_password=True)``, kombu's
``sanitize_url``) and every secret key.

Why hand-written rather than pydantic-settings: the checks that matter here are the
relations between settings, the supported database drivers and broker transports, and
messages naming the ``AWOOOP_*`` variable on one line; pydantic-settings would give the type
coercion (a few lines below) but not those, while adding pydantic and its compiled core as
runtime dependencies of every process, changing what ``Settings()`` means (it would read the
environment where the code and the tests mean "the defaults"), turning secrets into
``SecretStr`` at every call site, and reporting errors over several lines without saying
where a value came from (``awooop config`` does).
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from awooop.domain import timing

# Where the embedded development services keep their data and the state file
# (`.awooop/env`) that every process started by `make run` reads.
STATE_DIR = Path(os.environ.get("AWOOOP_STATE_DIR", Path.cwd() / ".awooop"))
# The env file `awooop dev up` writes, relative to a checkout (see :func:`discover`).
ENV_FILE = Path(".awooop") / "env"


class ConfigError(RuntimeError):
    """The configuration is incomplete or invalid; the message says which variable."""


# What every process needs; commands that need less say so.
REQUIRED = ("database_url", "broker_url", "secret_key")


@dataclass(frozen=True)
class Settings:
    database_url: str = ""
    broker_url: str = ""
    # Fernet keys, comma-separated, newest first (:attr:`secret_keys`): the newest encrypts
    # stored secrets and signs console sessions; every key decrypts and verifies, so a key
    # can be rotated without downtime (docs/operations.md, "Rotating the secret key").
    secret_key: str = ""
    port: int = 8000
    web_workers: int = 4
    web_threads: int = 4
    # gunicorn access log on stdout (paths only: no query strings, no headers).
    access_log: bool = True
    # Lease protocol: the lease, its renewals, the stale-run reaper (docs/protocol.md).
    lease_ttl_seconds: float = 300.0
    heartbeat_interval_seconds: float = 30.0
    reaper_interval_seconds: float = 60.0
    # Worker liveness (the rule: awooop.domain.timing): each worker process beats its row in
    # awooop_worker every liveness interval, and stops believing it holds its runs when no
    # beat committed for dead_after - belief_margin seconds. Every watch interval the reaper
    # looks at the rows of workers holding runs, and takes the runs of one whose row it has
    # itself seen unchanged for dead_after seconds (its own clock, not the database's): a
    # dead worker's runs are claimable again within about dead_after + 2 x watch_interval
    # (40 s by default). Rows of workers not seen for worker_prune_after_seconds are deleted.
    worker_liveness_interval_seconds: float = 5.0
    worker_dead_after_seconds: float = 20.0
    worker_belief_margin_seconds: float = 5.0
    worker_watch_interval_seconds: float = 10.0
    worker_prune_after_seconds: float = 3600.0
    # Sending a run's message after the commit (Redis broker): each try waits at most
    # publish_timeout; after a failed try, sends are skipped for publish_retry seconds (the
    # orphan sweep sends those runs' messages), so a broker that does not answer costs
    # admission one short wait per interval, not one per request.
    broker_publish_timeout_seconds: float = 1.0
    broker_publish_retry_seconds: float = 5.0
    # Orphan sweep: claimable runs whose message was sent longer ago than this get it again.
    orphan_after_seconds: float = 120.0
    orphan_interval_seconds: float = 30.0
    orphan_batch_size: int = 500
    # Dedupe rows live this long (a provider's retries fall well inside it), pruned in batches.
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
    # Operators may close a run stuck in manual intervention without compensating.
    manual_close_enabled: bool = False
    # Per-project quotas and rate limits are set per project (`awooop project limits`).
    # Retry-After sent with a 429 E-QUOTA-001 (active-run quota reached).
    quota_retry_after_seconds: int = 30
    # The Redis counting rate-limit windows (default: the broker, when it is Redis). When it
    # is unreachable, requests are allowed and it is not asked again for retry_seconds.
    rate_limit_redis_url: str = ""
    rate_limit_timeout_seconds: float = 0.25
    rate_limit_retry_seconds: float = 10.0
    # A step handler that has not returned after this long is taken from its worker by the
    # due-timer sweep (a new lease epoch fences its late writes) and its outcome is unknown:
    # its resolver finds out, or a person decides. Every forward step that is not a tool call
    # has this timeout unless it sets its own (``Step(timeout=…)``, longer or shorter), so a
    # wedged handler cannot hold a run for longer.
    step_timeout_seconds: float = 900.0
    # Scheduled workflows (docs/schedules.md): every interval the schedule sweep starts the
    # latest tick of each scheduled workflow in each project that allows it, once (the tick is
    # the run's dedupe key). A tick found more than max_lateness after its time (beat was
    # down, the deployment is new, the project's active-run quota kept refusing it) is
    # skipped and logged, as are the ticks before the latest: a schedule never catches up.
    # At least twice the interval, so a pass that is one interval late still runs its tick.
    schedule_interval_seconds: float = 30.0
    schedule_max_lateness_seconds: float = 300.0
    # A run whose workflow definition (name, version, digest) no worker that claims it has is
    # handed back every minute, and fails (E-RUN-003) once it has been handed back for this
    # long without a worker that has the definition claiming it.
    workflow_unavailable_fail_after_seconds: float = 900.0
    # Bulk reruns (POST …/runs/rerun): the new runs become claimable at most this many per
    # second — the default, and the most a request may ask for — so a rerun of a thousand
    # runs never floods the workers.
    rerun_rate_per_second: float = 5.0
    rerun_max_rate_per_second: float = 50.0
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
    # `awooop migrate` (docs/upgrading.md): each migration's transaction waits at most
    # lock_timeout for a table lock, so admissions never queue for long behind a migration
    # that waits for a long transaction; a migration cancelled so is tried again lock_retries
    # times, a lock timeout apart. A second `awooop migrate` waits up to wait_seconds for the
    # one running to finish, then gives up (exit status 1).
    migrate_lock_timeout_seconds: float = 5.0
    migrate_lock_retries: int = 5
    migrate_wait_seconds: float = 600.0
    # TCP keepalives on every database connection (libpq keepalives_*), and how long data may
    # stay unacknowledged before the connection is dropped (libpq tcp_user_timeout): a dead
    # peer is noticed in about idle + interval * count seconds.
    db_keepalives_idle_seconds: int = 15
    db_keepalives_interval_seconds: int = 5
    db_keepalives_count: int = 3
    db_tcp_user_timeout_seconds: float = 30.0
    # Behind a pooler in transaction mode (PgBouncer, docs/operations.md "Behind PgBouncer"):
    # prepared_statements false sends the hot statements as plain SQL instead of SQL-level
    # PREPARE / EXECUTE (a prepared statement lives in one server session, and the pooler
    # moves each transaction to whichever server connection is free); session_options false
    # sends no libpq `options` startup parameter (PgBouncer refuses it), so the statement and
    # lock timeouts above must then be set on the server (ALTER ROLE … SET, or the pooler's
    # connect_query).
    database_prepared_statements: bool = True
    database_session_options: bool = True
    # A worker's fenced write that fails on a transient database error (connection reset,
    # serialization failure, statement or lock timeout) is tried again this many times, after
    # a jittered exponential back-off from base up to max; then the run is handed back.
    write_retries: int = 4
    write_retry_base_seconds: float = 0.1
    write_retry_max_seconds: float = 2.0
    log_level: str = "INFO"
    # OpenTelemetry spans (awooop.telemetry; the otel extra): "otlp" exports them over
    # OTLP/HTTP (the SDK's OTEL_EXPORTER_OTLP_* variables say where), "console" prints them,
    # "off" makes none.
    tracing: str = "off"
    # /readyz: how long each dependency check (database, broker) may take before it fails.
    readiness_timeout_seconds: float = 2.0
    # /metrics: statement timeout of the gauges read from the database at scrape time.
    metrics_query_timeout_seconds: float = 2.0
    # A Celery worker or beat with a port here serves its own metrics over HTTP (the metric
    # files of its PROMETHEUS_MULTIPROC_DIR, which must then be its own); 0: no endpoint, its
    # counters reach Prometheus through a web server sharing its directory (one host).
    metrics_port: int = 0
    metrics_address: str = "127.0.0.1"
    # Celery task events for Flower; off saves about 0.8 ms of worker CPU per run.
    task_events: bool = True
    # Comma-separated modules that register deployment workflows at process start.
    workflow_modules: str = ""
    beat_schedule_file: str = str(STATE_DIR / "celerybeat-schedule")

    @property
    def rate_limit_url(self) -> str:
        return self.rate_limit_redis_url or self.broker_url

    @property
    def secret_keys(self) -> tuple[str, ...]:
        """``AWOOOP_SECRET_KEY``'s keys, newest first (empty when it is not set).

        One variable holding a list, rather than a second variable for the previous keys:
        the key set is one secret an operator keeps in one place, rotation is "put the new
        key in front" and retirement "remove the last one", and no process can be started
        with a new key but without the old one by forgetting a second variable (the same
        shape as Airflow's ``fernet_key``). Fernet keys are url-safe base64, which has no
        comma, so the list is unambiguous.
        """
        return tuple(k.strip() for k in self.secret_key.split(",") if k.strip())

    @property
    def workflow_module_list(self) -> list[str]:
        return [m.strip() for m in self.workflow_modules.split(",") if m.strip()]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.masked().items())
        return f"Settings({shown})"

    def masked(self) -> dict[str, object]:
        """Every setting by field name, with URL passwords and the secret key masked."""
        return {f.name: mask_setting(f.name, getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        required: tuple[str, ...] = REQUIRED,
    ) -> Settings:
        """The settings in ``environ`` (default: the process environment), checked.

        Raises :class:`ConfigError` naming every variable that is missing (of ``required``)
        or invalid, on one line.
        """
        env = os.environ if environ is None else environ
        values, problems = _parse(env)
        missing = [variable(name) for name in required if not env.get(variable(name))]
        if missing:
            problems.insert(0, _missing_message(missing))
        settings = replace(cls(), **values)
        if not problems:  # relations only between values that are each valid
            problems = _relation_problems(settings)
        if problems:
            raise ConfigError("; ".join(problems))
        return settings

    def statement_timeout(self, role: str) -> float:
        """``AWOOOP_DB_STATEMENT_TIMEOUT_<ROLE>_SECONDS``."""
        return float(getattr(self, f"db_statement_timeout_{role}_seconds"))

    def lock_timeout(self, role: str) -> float:
        """``AWOOOP_DB_LOCK_TIMEOUT_<ROLE>_SECONDS``."""
        return float(getattr(self, f"db_lock_timeout_{role}_seconds"))


def variable(name: str) -> str:
    """The environment variable of the setting ``name`` (``AWOOOP_<NAME>``)."""
    return f"AWOOOP_{name.upper()}"


SETTING_VARIABLES = frozenset(variable(f.name) for f in fields(Settings))
# Variables the processes read that are not AWOOOP_* settings (their libraries' own names),
# shown by `awooop config`; the second is a credential.
OTHER_VARIABLES = ("PROMETHEUS_MULTIPROC_DIR", "FLOWER_BASIC_AUTH")
# What `awooop runs` (a client of the HTTP API, not a process of the deployment) reads: the
# web's address and an API token. Not settings, and not reported as unknown ones.
API_URL_VARIABLE = "AWOOOP_API_URL"
API_TOKEN_VARIABLE = "AWOOOP_API_TOKEN"  # noqa: S105 - a variable name
DEFAULT_API_URL = "http://127.0.0.1:8000"
CLIENT_VARIABLES = (API_URL_VARIABLE, API_TOKEN_VARIABLE)

# --- Checking values ----------------------------------------------------------------------

# Numbers must be positive, except these (0 means "never cache" / "do not retry").
_MAY_BE_ZERO = frozenset(
    {"auth_cache_seconds", "write_retries", "metrics_port", "migrate_lock_retries"}
)
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TRACING_MODES = ("off", "otlp", "console")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# The database drivers the package ships (psycopg2); SQLAlchemy reads "postgresql" as it.
DATABASE_DRIVERS = ("postgresql+psycopg2", "postgresql")
# Celery's broker transports for Redis (plain, TLS, Sentinel) and RabbitMQ.
BROKER_SCHEMES = ("redis", "rediss", "sentinel", "amqp", "amqps", "pyamqp")
# What the rate limiter can use (awooop.ratelimit).
REDIS_SCHEMES = ("redis", "rediss", "unix")
_URL_CHECKS = {
    "database_url": "database",
    "broker_url": "broker",
    "rate_limit_redis_url": "redis",
    "telegram_api_base": "http",
    "line_api_base": "http",
    "public_base_url": "http",
}
SECRET_SETTINGS = frozenset({"secret_key"})


def _parse(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The settings ``env`` sets, parsed, and a message for each that is invalid."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in fields(Settings):
        name = variable(f.name)
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        try:
            values[f.name] = _parse_value(f.name, str(f.type), raw.strip())
        except ValueError as exc:
            problems.append(f"{name}{exc}")
    return values, problems


def _parse_value(name: str, kind: str, raw: str) -> Any:
    """The value of one setting; a ValueError's message continues ``AWOOOP_<NAME>``."""
    if kind == "bool":
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(f"={raw!r} is not a boolean (use true/false, 1/0, yes/no or on/off)")
    if kind in ("int", "float"):
        try:
            number: float = int(raw) if kind == "int" else float(raw)
        except ValueError:
            what = "a whole number" if kind == "int" else "a number"
            raise ValueError(f"={raw!r} is not {what}") from None
        if not math.isfinite(number):
            raise ValueError(f"={raw!r} is not a finite number")
        if name == "port" and not 1 <= number <= 65535:
            raise ValueError(f"={raw} is not a port number (1-65535)")
        if name == "metrics_port" and not 0 <= number <= 65535:
            raise ValueError(f"={raw} is not a port number (1-65535, or 0 for no endpoint)")
        if name in _MAY_BE_ZERO and number < 0:
            raise ValueError(f"={raw} must be 0 or more")
        if name not in _MAY_BE_ZERO and number <= 0:
            raise ValueError(f"={raw} must be positive")
        return number
    if name == "secret_key":
        return _check_fernet_keys(raw)  # never echoes the value
    elif name == "log_level":
        if raw.upper() not in _LOG_LEVELS:
            raise ValueError(f"={raw!r} is not a log level ({', '.join(_LOG_LEVELS)})")
        return raw.upper()
    elif name == "tracing":
        if raw.lower() not in TRACING_MODES:
            raise ValueError(f"={raw!r} is not one of {', '.join(TRACING_MODES)}")
        return raw.lower()
    elif name == "workflow_modules":
        for module in (m.strip() for m in raw.split(",")):
            if module and not _MODULE.fullmatch(module):
                raise ValueError(f": {module!r} is not a module name (comma-separated names)")
    elif name in _URL_CHECKS:
        _check_url(_URL_CHECKS[name], raw)
    return raw


def _check_fernet_keys(raw: str) -> str:
    """``raw`` as a comma-separated list of Fernet keys, newest first, without blanks
    around them; the messages say which key (by position), never what it is."""
    from cryptography.fernet import Fernet

    keys = [k.strip() for k in raw.split(",")]
    for position, key in enumerate(keys, 1):
        which = f" key {position} of {len(keys)}" if len(keys) > 1 else ""
        if not key:
            raise ValueError(f":{which} is empty (comma-separated Fernet keys, newest first)")
        try:
            Fernet(key.encode("ascii"))
        except (ValueError, TypeError, UnicodeEncodeError):
            raise ValueError(
                f"{':' if which else ''}{which} is not a Fernet key (32 url-safe "
                "base64-encoded bytes); make one with `awooop dev key`"
            ) from None
        if key in keys[: position - 1]:
            raise ValueError(f":{which} repeats key {keys.index(key) + 1}")
    return ",".join(keys)


def _check_url(kind: str, raw: str) -> None:
    shown = mask_url(raw)
    if kind == "database":
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        example = "postgresql+psycopg2://user:password@host:5432/database"
        # The parsers' own messages may quote part of the URL (a password), so none is shown.
        try:
            url = make_url(raw)
        except ArgumentError:
            raise ValueError(f"={shown} is not a database URL; use {example}") from None
        except ValueError:
            raise ValueError(f"={shown}: its port is not a number; use {example}") from None
        if url.drivername not in DATABASE_DRIVERS:
            raise ValueError(f"={shown}: driver {url.drivername!r} is not supported; use {example}")
        if url.host and "@" in url.host:
            raise ValueError(
                f"={shown} has more than one '@' before its host: write an '@' in the user "
                "name or password as %40"
            )
        if not url.database:
            raise ValueError(f"={shown} names no database; use {example}")
        return
    if kind == "http":
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(raw)
            parts.port  # noqa: B018 - parses the port, raising on a bad one
        except ValueError:
            raise ValueError(f"={shown} is not a URL (check its host and port)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"={shown} is not an http:// or https:// URL with a host")
        return
    from kombu.utils.url import url_to_parts

    schemes = BROKER_SCHEMES if kind == "broker" else REDIS_SCHEMES
    # Celery takes several broker URLs separated by ";" (fail-over).
    for part in raw.split(";") if kind == "broker" else [raw]:
        scheme, sep, _ = part.strip().partition("://")
        if not sep or scheme not in schemes:
            raise ValueError(f"={shown} is not a {' '.join(s + '://' for s in schemes)} URL")
        try:
            broker = url_to_parts(part.strip())
        except ValueError:
            raise ValueError(f"={shown}: its port is not a number") from None
        if scheme in ("redis", "rediss") and broker.path and not broker.path.isdigit():
            raise ValueError(f"={shown}: the path must be a Redis database number, e.g. /0")


def _missing_message(missing: list[str]) -> str:
    names = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
    verb = "are" if len(missing) > 1 else "is"
    return (
        f"{names} {verb} not set. For development run `make run` (it starts embedded services "
        f"and writes {STATE_DIR / 'env'}), or export {'them' if len(missing) > 1 else 'it'}"
    )


def _relation_problems(settings: Settings) -> list[str]:
    """What is wrong between settings that are each valid."""
    problems = _lease_timing_problems(settings)
    ttl, reaper = settings.lease_ttl_seconds, settings.reaper_interval_seconds
    if reaper >= ttl:
        problems.append(
            f"AWOOOP_REAPER_INTERVAL_SECONDS={reaper:g} must be less than "
            f"AWOOOP_LEASE_TTL_SECONDS={ttl:g}: an expired lease must be found within a lease"
        )
    interval, lateness = settings.schedule_interval_seconds, settings.schedule_max_lateness_seconds
    if lateness < 2 * interval:
        problems.append(
            f"AWOOOP_SCHEDULE_MAX_LATENESS_SECONDS={lateness:g} must be at least twice "
            f"AWOOOP_SCHEDULE_INTERVAL_SECONDS={interval:g}: a tick must survive one late pass"
        )
    rate, most_rate = settings.rerun_rate_per_second, settings.rerun_max_rate_per_second
    if rate > most_rate:
        problems.append(
            f"AWOOOP_RERUN_RATE_PER_SECOND={rate:g} must be at most "
            f"AWOOOP_RERUN_MAX_RATE_PER_SECOND={most_rate:g}"
        )
    for prefix in ("write_retry", "outbox"):
        base_name, max_name = (
            ("write_retry_base_seconds", "write_retry_max_seconds")
            if prefix == "write_retry"
            else ("outbox_base_delay_seconds", "outbox_max_delay_seconds")
        )
        base, most = getattr(settings, base_name), getattr(settings, max_name)
        if base > most:
            problems.append(
                f"{variable(base_name)}={base:g} must be at most {variable(max_name)}={most:g}"
            )
    return problems


def _lease_timing_problems(settings: Settings) -> list[str]:
    """A lease is renewed at least ``RENEWALS_PER_TTL`` times per TTL, so one or two failed
    renewals (a database hiccup, a dropped connection) do not lose it; the liveness settings
    keep the rule of :mod:`awooop.domain.timing`."""
    problems = []
    interval, ttl = settings.heartbeat_interval_seconds, settings.lease_ttl_seconds
    most = ttl / timing.RENEWALS_PER_TTL
    if not timing.renewals_fit(ttl, interval):
        problems.append(
            f"AWOOOP_HEARTBEAT_INTERVAL_SECONDS={interval:g} must be positive and at most a "
            f"third of AWOOOP_LEASE_TTL_SECONDS={ttl:g} (at most {most:g}): "
            "a lease must survive two failed renewals"
        )
    problems += timing.liveness_problems(
        settings.worker_liveness_interval_seconds,
        settings.worker_dead_after_seconds,
        settings.worker_belief_margin_seconds,
    )
    return problems


def check_lease_timing(settings: Settings) -> None:
    """Refuse a renewal interval longer than a third of the lease TTL, or a worker judged dead
    before three liveness intervals (:func:`_lease_timing_problems`)."""
    problems = _lease_timing_problems(settings)
    if problems:
        raise ConfigError("; ".join(problems))


# --- Masking ------------------------------------------------------------------------------

MASK = "***"
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:password|passwd|pwd|pass|secret|token|key|sslpassword)=)[^&;#]*"
)
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:@/]*:).*@")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)?.*@")


def mask_url(url: str) -> str:
    """``url`` with its password, and query parameters that look like one, replaced by
    ``***`` (several URLs separated by ``;`` each). SQLAlchemy renders a URL it can parse
    (``hide_password=True``); one it cannot is masked from its text alone."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    masked = []
    for part in url.split(";"):
        try:
            if part.count("@") > 1:  # an unescaped "@" in the password: not parsed right
                raise ValueError(part)
            shown = make_url(part).render_as_string(hide_password=True) if part else part
        except (ArgumentError, ValueError):
            # Unparsable: the user's name is kept when it can be told from the password.
            shown, found = _USERINFO_PASSWORD.subn(rf"\g<1>{MASK}@", part)
            if not found:
                shown = _USERINFO.sub(lambda m: f"{m.group(1) or ''}{MASK}@", part)
        masked.append(_QUERY_SECRET.sub(rf"\g<1>{MASK}", shown))
    return ";".join(masked)


def mask_setting(name: str, value: object) -> object:
    """A setting's value as it may be shown: secrets masked, URLs without passwords."""
    if name in SECRET_SETTINGS or name == "flower_basic_auth":
        if not value:
            return value
        if name == "flower_basic_auth":
            user, _, _ = str(value).partition(":")
            return f"{user}:{MASK}"
        # One mask per key: how many keys are configured shows, none of them does.
        return ",".join(MASK for _ in str(value).split(","))
    if isinstance(value, str) and (name in _URL_CHECKS or name.endswith("_url")):
        return mask_url(value)
    return value


# --- Where settings come from -------------------------------------------------------------


@dataclass(frozen=True)
class Environment:
    """The variables settings are read from, and where each one came from."""

    values: Mapping[str, str]
    env_file: Path | None = None
    from_file: frozenset[str] = frozenset()

    def source(self, name: str) -> str:
        """``environment``, ``env file <path>`` or ``default`` for the variable ``name``."""
        if name in self.from_file:
            return f"env file {self.env_file}"
        return "environment" if self.values.get(name) else "default"


def deployment_settings(environ: Mapping[str, str]) -> list[str]:
    """The settings naming a deployment — its database, broker or key — that ``environ``
    sets (non-empty), sorted."""
    return sorted(variable(name) for name in REQUIRED if environ.get(variable(name)))


def find_env_file(start: Path) -> Path | None:
    """The nearest ``.awooop/env`` in ``start`` or one of its parents."""
    for directory in (start, *start.parents):
        candidate = directory / ENV_FILE
        if candidate.is_file():
            return candidate
    return None


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines as ``awooop dev up`` writes them (shell-quoted values; ``#``
    comments). A line that is not one is a :class:`ConfigError` naming the file and line."""
    values = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{path}:{number} is not a KEY=VALUE line")
        try:
            words = shlex.split(value)
        except ValueError as exc:  # the message quotes no part of the value
            raise ConfigError(f"{path}:{number}: {key.strip()}: {exc}") from None
        values[key.strip()] = " ".join(words)
    return values


def discover(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Environment:
    """The variables the ``awooop`` command reads its settings from.

    Unless the environment names a deployment, the checkout's ``.awooop/env`` (written by
    ``awooop dev up``; the nearest in the current directory or its parents, or the one in
    ``$AWOOOP_STATE_DIR``) supplies what the environment lacks, as ``make run`` does for its
    processes — so ``AWOOOP_WORKFLOW_MODULES=mine awooop workflows`` in a checkout uses the
    checkout's database with your modules. A database, broker or key in the environment
    makes the environment the whole configuration: no file is read, so a shell configured for
    a deployment never mixes in a development checkout's database or key.
    """
    env = dict(os.environ if environ is None else environ)
    if deployment_settings(env):
        return Environment(env)
    state_dir = env.get("AWOOOP_STATE_DIR")
    if state_dir:
        path: Path | None = Path(state_dir) / "env"
        if path is not None and not path.is_file():
            path = None
    else:
        path = find_env_file((cwd or Path.cwd()).resolve())
    if path is None:
        return Environment(env)
    from_file = read_env_file(path)
    added = {k: v for k, v in from_file.items() if k not in env}
    return Environment({**env, **added}, path, frozenset(added))


def describe(environment: Environment, required: tuple[str, ...] = REQUIRED) -> dict[str, Any]:
    """Every setting with its value (masked) and source, and what is wrong with the values:
    ``{"env_file", "settings": [{"variable", "value", "source"}], "problems", "notes"}``
    (``awooop config`` adds what a starting process checks: :func:`awooop.bootstrap.describe`).
    """
    env = environment.values
    values, _ = _parse(env)
    defaults = Settings()
    rows = []
    for f in fields(Settings):
        name = variable(f.name)
        if f.name in values:
            value = values[f.name]
        elif env.get(name):  # set but invalid: shown as given (masked)
            value = env[name]
        else:
            value = getattr(defaults, f.name)
        rows.append(
            {
                "variable": name,
                "value": mask_setting(f.name, value),
                "source": environment.source(name),
            }
        )
    for name in OTHER_VARIABLES:
        rows.append(
            {
                "variable": name,
                "value": mask_setting(name.lower(), env.get(name, "")),
                "source": environment.source(name),
            }
        )
    try:
        Settings.from_env(env, required)
        problems: list[str] = []
    except ConfigError as exc:
        problems = str(exc).split("; ")
    unknown = sorted(
        name
        for name in env
        if name.startswith("AWOOOP_")
        and name not in SETTING_VARIABLES
        and name != "AWOOOP_STATE_DIR"
        and name not in CLIENT_VARIABLES
        and not name.startswith(("AWOOOP_EMBEDDED_", "AWOOOP_TEST_"))
    )
    notes = []
    for name in unknown:
        close = difflib.get_close_matches(name, SETTING_VARIABLES, n=1)
        notes.append(f"{name} is not a setting" + (f" (did you mean {close[0]}?)" if close else ""))
    return {
        "env_file": str(environment.env_file) if environment.env_file else None,
        "settings": rows,
        "problems": problems,
        "notes": notes,
    }


# --- The process's settings ---------------------------------------------------------------


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
