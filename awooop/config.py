"""Every knob AwoooP has, read once from ``AWOOOP_*`` environment variables.

Nothing else in the package reads the environment. Defaults are the production values
(5-minute lease, 30-second heartbeat, 60-second reaper, 7-day dedupe TTL); tests and
benchmarks shorten them through the same variables. Each setting says what it does where it
is defined (:class:`Settings`); docs/configuration.md is rendered from those words, the
defaults and the checks (:mod:`awooop.config_doc`, ``make docs``).

Settings are checked when they are read (:meth:`Settings.from_env`, with
:mod:`awooop.config_checks`): every number parses and is in range, booleans are booleans,
URLs parse (the database URL names a supported driver, the broker URL a supported
transport), and the timings keep their relations (a lease renewed at least three times per
TTL, the reaper passing within a lease). Every problem is reported at once, on one line,
naming the variable; a starting process (web, worker, beat) prints it and exits with status
2 (:func:`awooop.bootstrap.settings_or_exit`), the ``awooop`` command likewise. What a
process checks beyond the values when it starts (its workflow modules import, every
workflow's lease fits) is in :mod:`awooop.bootstrap`, so reading settings imports no
workflow.

Secrets never leave this module in clear: ``repr(settings)``, :meth:`Settings.masked` (what
``awooop config`` prints and the start-up log line shows) and every error message mask URL
passwords (:func:`awooop.masking.mask_url`) and every secret key.

Why hand-written rather than pydantic-settings: the checks that matter here are the
relations between settings, the supported database drivers and broker transports, and
messages naming the ``AWOOOP_*`` variable on one line; pydantic-settings would give the type
coercion (:func:`awooop.config_checks.parse_value`) but not those, while adding pydantic and
its compiled core as runtime dependencies of every process, changing what ``Settings()``
means (it would read the environment where the code and the tests mean "the defaults"),
turning secrets into ``SecretStr`` at every call site, and reporting errors over several
lines without saying where a value came from (``awooop config`` does).
"""

from __future__ import annotations

import difflib
import functools
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from awooop import config_checks
from awooop.config_checks import variable
from awooop.masking import MASK, mask_url

# Where the embedded development services keep their data and the state file
# (`.awooop/env`) that every process started by `make run` reads.
STATE_DIR = Path(os.environ.get("AWOOOP_STATE_DIR", Path.cwd() / ".awooop"))
# The env file `awooop dev up` writes, relative to a checkout (see :func:`discover`).
ENV_FILE = Path(".awooop") / "env"


class ConfigError(RuntimeError):
    """The configuration is incomplete or invalid; the message says which variable."""


# What every process needs; commands that need less say so.
REQUIRED = ("database_url", "broker_url", "secret_key")


def _setting(default: Any, doc: str, shown: str = "") -> Any:
    """A setting's default and what it does (``doc``: the words of docs/configuration.md);
    ``shown``: the default as that page states it, where the code computes it."""
    return field(default=default, metadata={"doc": doc, "shown": shown})


@dataclass(frozen=True)
class Settings:
    """Every setting, by the name of its variable less ``AWOOOP_``; its default is the
    production value. ``Settings()`` is the defaults, :meth:`from_env` what a process reads.
    Each one's description is rendered, with its checks, into docs/configuration.md."""

    database_url: str = _setting(
        "",
        "The PostgreSQL database, the only source of truth; `make run` starts an embedded one "
        "for development.",
    )
    database_replica_url: str = _setting(
        "",
        "A streaming standby of that database for the web's reads that may lag: the ops "
        "console's list pages (overview, runs, interventions, approvals, workers) and the "
        "gauges `/metrics` reads. They are as old as the standby's replay lag: a run just "
        "admitted is missing from the runs list for that long ([Replica reads]"
        "(operations.md#replica-reads)). Empty: every read goes to the primary.",
    )
    database_failover_check: str = _setting(
        "warn",
        "What web, worker and beat do when they start on a primary that streams to standbys "
        "none of which is synchronous (so a failover could lose acknowledged events and "
        "issue a lease epoch twice): `warn` logs a warning, `refuse` exits with status 2, "
        "`off` does not check — for standbys that are never promoted ([High availability]"
        "(operations.md#high-availability)).",
    )
    broker_url: str = _setting(
        "",
        "The Celery broker, which carries the run messages (each a run id: a nudge, the run "
        "itself is in PostgreSQL); `make run` starts an embedded Redis for development.",
    )
    broker_sentinel_master: str = _setting(
        "",
        "The name of the master the sentinels of a `sentinel://` broker URL (or rate-limit "
        "URL) monitor; Celery gets it as `broker_transport_options['master_name']`, and the "
        "run sender, `/readyz` and the rate limiter ask those sentinels for that master "
        "([URLs](#urls)).",
    )
    secret_key: str = _setting(
        "",
        "Fernet keys, comma-separated, newest first. The newest encrypts the secrets stored in "
        "the database (channel HMAC keys, outbound credentials, approval tokens waiting to be "
        "sent) and signs ops console sessions; every key decrypts and verifies, so a key is "
        "rotated without downtime ([Rotating the secret key]"
        "(operations.md#rotating-the-secret-key)).",
    )
    port: int = _setting(
        8000,
        "The web's port; gunicorn listens on 127.0.0.1 (its `-b` option listens elsewhere).",
    )
    web_workers: int = _setting(4, "gunicorn worker processes of each web server.")
    web_threads: int = _setting(4, "Threads of each gunicorn worker process.")
    access_log: bool = _setting(
        True,
        "gunicorn's access log on stdout: method, path (no query string, no headers, approval "
        "tokens cut out), status, size and time.",
    )
    lease_ttl_seconds: float = _setting(
        300.0,
        "How long a claimed run's lease lasts unless renewed; the reaper takes back a RUNNING "
        "run whose lease expired. A workflow may set its own (`lease_ttl_seconds`).",
    )
    heartbeat_interval_seconds: float = _setting(
        30.0, "How often a worker's lease keeper renews the leases it holds."
    )
    reaper_interval_seconds: float = _setting(
        60.0,
        "How often the reaper's full pass runs: it takes back runs whose lease expired (and "
        "those of workers judged dead), and deletes the liveness rows of departed workers.",
    )
    worker_liveness_interval_seconds: float = _setting(
        5.0,
        "How often each worker process beats its liveness row (`awooop_worker.seen_at`), from "
        "its first run until it ends, on its lease keeper's thread.",
    )
    worker_dead_after_seconds: float = _setting(
        20.0,
        "A worker whose liveness row the reaper has itself seen unchanged this long, on its "
        "own clock, is judged dead: its RUNNING runs are handed back, however long their "
        "leases still run.",
    )
    worker_belief_margin_seconds: float = _setting(
        5.0,
        "A worker stops believing it holds its runs (`ctx.lease_held` false) when no liveness "
        "beat has committed for `AWOOOP_WORKER_DEAD_AFTER_SECONDS` minus this, so before the "
        "reaper may hand them on; what the clocks' drift leaves of it is for a handler "
        "between reading `ctx.lease_held` and its side effect.",
    )
    worker_watch_interval_seconds: float = _setting(
        10.0,
        "How often the reaper reads the liveness rows of the workers holding runs, and hands "
        "on the runs of those it judges dead (`awooop.sweeps.watch_workers`).",
    )
    worker_prune_after_seconds: float = _setting(
        3600.0,
        "Liveness rows of workers not seen this long, and holding no run, are deleted by the "
        "reaper's full pass.",
    )
    broker_publish_timeout_seconds: float = _setting(
        1.0,
        "How long each try at sending a run's message after its commit (Redis broker) may wait.",
    )
    broker_publish_retry_seconds: float = _setting(
        5.0,
        "After a failed send, sends are skipped this long (the orphan sweep sends those runs' "
        "messages): a broker that does not answer costs a process one short wait per "
        "interval, not one per message. Admission never waits for it: the event is committed "
        "and answered 202, and a thread of the web process sends the message.",
    )
    orphan_after_seconds: float = _setting(
        120.0,
        "A claimable run whose message was sent longer ago than this, and which nobody "
        "claimed, gets its message again (the broker lost it).",
    )
    orphan_interval_seconds: float = _setting(30.0, "How often the orphan sweep runs.")
    orphan_batch_size: int = _setting(500, "Messages the orphan sweep re-sends per pass, at most.")
    dedupe_ttl_seconds: float = _setting(
        7 * 24 * 3600.0,
        "How long a dedupe row (a provider's event id, an `Idempotency-Key`) is kept: a "
        "retry or redelivery within it gets the same run back.",
    )
    prune_interval_seconds: float = _setting(
        300.0, "How often the dedupe prune deletes the dedupe rows past their lifetime."
    )
    prune_batch_size: int = _setting(5000, "Dedupe rows the prune deletes per transaction.")
    run_retention_days: float = _setting(
        30.0,
        "Finished runs (COMPLETED, FAILED, CANCELLED) are deleted, with their events, timers, "
        "approvals, inbox and dedupe rows, once they finished this many days ago and their "
        "dedupe row has expired. A project may set its own (`awooop project retention`).",
    )
    outbox_retention_days: float = _setting(
        30.0,
        "SENT and PARKED outbox messages are deleted this many days after they were created "
        "(PENDING ones never).",
    )
    retention_interval_seconds: float = _setting(300.0, "How often the retention sweep runs.")
    retention_batch_size: int = _setting(
        500, "Runs (or outbox messages) the retention sweep deletes per transaction."
    )
    sweep_pass_seconds: float = _setting(
        10.0,
        "A deleting pass (retention, dedupe prune) starts no batch after this long; the rest "
        "waits for its next pass, so a backlog never holds the one maintenance worker (and "
        "the timers and reaper behind it) for much longer.",
    )
    manual_close_enabled: bool = _setting(
        False,
        "Allow admins to close a run stuck in manual intervention without compensating "
        "(`manual_close`).",
    )
    quota_retry_after_seconds: int = _setting(
        30,
        "`Retry-After` of a 429 `E-QUOTA-001` (a project's active-run quota reached). Quotas "
        "and rate limits are set per project (`awooop project limits`).",
    )
    rate_limit_redis_url: str = _setting(
        "",
        "The Redis that counts the rate-limit windows.",
        shown="the broker URL, when it is Redis",
    )
    rate_limit_timeout_seconds: float = _setting(
        0.25, "How long a rate-limit count may wait for that Redis."
    )
    rate_limit_retry_seconds: float = _setting(
        10.0,
        "When that Redis does not answer, requests are allowed and it is not asked again for "
        "this long.",
    )
    step_timeout_seconds: float = _setting(
        900.0,
        "A step handler that has not returned after this long is taken from its worker by the "
        "due-timer sweep (a new lease epoch fences its late writes) and its outcome is "
        "unknown: its resolver finds out, or a person decides. Every forward step that is not "
        "a tool call has this timeout unless it sets its own (`Step(timeout=…)`).",
    )
    schedule_interval_seconds: float = _setting(
        30.0,
        "How often the schedule sweep starts the latest tick of each scheduled workflow, in "
        "each project that allows it, once (the tick is the run's dedupe key; "
        "[schedules](schedules.md)).",
    )
    schedule_max_lateness_seconds: float = _setting(
        300.0,
        "A tick found more than this after its time (beat was down, the deployment is new, "
        "the project's quota kept refusing it) is skipped and logged, as are the ticks "
        "before the latest: a schedule never catches up.",
    )
    workflow_unavailable_fail_after_seconds: float = _setting(
        900.0,
        "A run whose workflow definition (name, version, digest) no worker that claims it has "
        "is handed back every minute, and fails `E-RUN-003` once it has been handed back this "
        "long ([versions](versions.md)).",
    )
    rerun_rate_per_second: float = _setting(
        5.0,
        "A bulk rerun's new runs (`POST …/runs/rerun`, the console's *Rerun all…*) become "
        "claimable at most this many per second, unless the request asks for another rate.",
    )
    rerun_max_rate_per_second: float = _setting(
        50.0, "The highest rate a bulk rerun request may ask for."
    )
    timer_interval_seconds: float = _setting(
        2.0,
        "How often the due-timer sweep fires the due timers (retry wake-ups, resolver polls; "
        "step, tool and approval timeouts).",
    )
    timer_batch_size: int = _setting(
        500, "Timers fired per transaction; a pass goes on while its batches are full."
    )
    max_body_bytes: int = _setting(
        1024 * 1024, "The largest request body the web takes; a larger one is answered 413."
    )
    telegram_api_base: str = _setting(
        "https://api.telegram.org", "The Telegram Bot API, for outbound messages."
    )
    line_api_base: str = _setting(
        "https://api.line.me", "The LINE Messaging API, for outbound messages."
    )
    outbox_max_attempts: int = _setting(
        8,
        "An outbound message still failing after this many sends is parked: kept, visible "
        "(`awooop outbox list --status PARKED`), not sent again.",
    )
    outbox_base_delay_seconds: float = _setting(
        2.0,
        "The wait after a message's first failed send; it doubles with each further one "
        "(±10 % jitter), up to `AWOOOP_OUTBOX_MAX_DELAY_SECONDS`.",
    )
    outbox_max_delay_seconds: float = _setting(
        300.0, "The longest wait between two sends of a message."
    )
    outbox_send_timeout_seconds: float = _setting(
        10.0, "Each socket read of a provider call, and a deadline on the whole send."
    )
    outbox_interval_seconds: float = _setting(
        2.0,
        "How often the due-message sweep sends the messages that are due (retries, and sends "
        "whose task was lost).",
    )
    outbox_batch_size: int = _setting(200, "Messages the due-message sweep takes per pass.")
    public_base_url: str = _setting(
        "",
        "This deployment's public address (`https://awooop.example.com`), used in the links "
        "sent out (the approval URL in a webhook); empty: links are left out. An `https://` "
        "address marks the ops console's cookie Secure.",
    )
    console_session_seconds: float = _setting(
        8 * 3600.0, "How long an ops console sign-in lasts without a request."
    )
    auth_cache_seconds: float = _setting(
        5.0,
        "How long a web process reuses a project's routes, allowed workflows and credential "
        "hashes: revoked credentials, changed routes and a workflow taken off the allowed "
        "list take effect within this (one allowed can be started at once). 0: never reused.",
    )
    db_pool_size: int = _setting(
        5,
        "Database connections each process keeps in its pool (a web process: one more per "
        "thread, `AWOOOP_WEB_THREADS`, which the thread keeps for admission); as many again "
        "may be opened when all are busy.",
    )
    db_statement_timeout_web_seconds: float = _setting(
        15.0,
        "The server cancels a web process's statement running longer than this "
        "(`statement_timeout`).",
    )
    db_statement_timeout_worker_seconds: float = _setting(
        30.0, "Likewise for a worker's statements (steps, claims, fenced writes)."
    )
    db_statement_timeout_keeper_seconds: float = _setting(
        5.0,
        "Likewise for the lease keeper's renewals and liveness beats. The keeper also gives "
        "up on a renewal after the lesser of this and `AWOOOP_HEARTBEAT_INTERVAL_SECONDS` / 2 "
        "even when the server cannot answer (a half-open connection), then retries on a "
        "fresh connection.",
    )
    db_statement_timeout_sweeps_seconds: float = _setting(
        60.0, "Likewise for the maintenance sweeps' statements."
    )
    db_lock_timeout_web_seconds: float = _setting(
        5.0,
        "The server cancels a web process's statement waiting longer than this for a lock "
        "(`lock_timeout`).",
    )
    db_lock_timeout_worker_seconds: float = _setting(10.0, "Likewise for a worker's statements.")
    db_lock_timeout_keeper_seconds: float = _setting(
        2.0, "Likewise for the lease keeper's statements."
    )
    db_lock_timeout_sweeps_seconds: float = _setting(
        10.0, "Likewise for the maintenance sweeps' statements."
    )
    db_keeper_pool_size: int = _setting(
        2,
        "The lease keeper's own database connections in each worker process: renewals and "
        "liveness beats never wait behind step work.",
    )
    migrate_lock_timeout_seconds: float = _setting(
        5.0,
        "`awooop migrate`: how long each migration's transaction waits for a table lock, so "
        "admissions never queue long behind a migration waiting for a long transaction "
        "([upgrading](upgrading.md)).",
    )
    migrate_lock_retries: int = _setting(
        5, "How many times a migration cancelled so is tried again, a lock timeout apart."
    )
    migrate_wait_seconds: float = _setting(
        600.0,
        "How long a second `awooop migrate` waits for the one running to finish before it "
        "gives up (exit status 1).",
    )
    db_keepalives_idle_seconds: int = _setting(
        15, "TCP keepalives on every database connection: the first probe after this long idle."
    )
    db_keepalives_interval_seconds: int = _setting(5, "Seconds between two keepalive probes.")
    db_keepalives_count: int = _setting(
        3, "Keepalive probes left unanswered before the connection is dropped."
    )
    db_tcp_user_timeout_seconds: float = _setting(
        30.0,
        "How long data sent on a database connection may stay unacknowledged before the "
        "connection is dropped (libpq `tcp_user_timeout`).",
    )
    database_prepared_statements: bool = _setting(
        True,
        "Prepare the hot statements (admission, claim, step record, finish, renew) on each "
        "connection with SQL `PREPARE`. Either way, every few seconds a connection drops the "
        "plans its session cached (`DISCARD PLANS`), so that the statements' plans and those "
        "of PostgreSQL's own foreign-key checks follow the tables' size. False behind a "
        "pooler in transaction mode, which moves each transaction to whichever server "
        "connection is free ([Behind PgBouncer](operations.md#behind-pgbouncer)).",
    )
    database_session_options: bool = _setting(
        True,
        "Send the statement and lock timeouts with each connection (libpq `options`). False "
        "for a pooler that refuses them (PgBouncer): then set those timeouts on the server "
        "(`ALTER ROLE … SET`, or the pooler's `connect_query`).",
    )
    write_retries: int = _setting(
        4,
        "A worker's fenced write that fails on a transient database error (connection reset, "
        "serialization failure, statement or lock timeout) is tried again this many times, "
        "then the run is handed back. 0: not tried again.",
    )
    write_retry_base_seconds: float = _setting(
        0.1,
        "Before the first such retry a worker waits between half and all of this; the bound "
        "doubles with each further retry, up to `AWOOOP_WRITE_RETRY_MAX_SECONDS`.",
    )
    write_retry_max_seconds: float = _setting(2.0, "The most a worker waits before such a retry.")
    log_level: str = _setting("INFO", "The least level logged (JSON lines on stdout).")
    tracing: str = _setting(
        "off",
        "OpenTelemetry spans (the `otel` extra): `otlp` exports them over OTLP/HTTP (the SDK's "
        "`OTEL_EXPORTER_OTLP_*` variables say where), `console` prints them, `off` makes none "
        "([Tracing](observability.md#tracing)).",
    )
    readiness_timeout_seconds: float = _setting(
        2.0, "`/readyz`: how long each dependency check (database, broker) may take."
    )
    metrics_query_timeout_seconds: float = _setting(
        2.0, "`/metrics`: the statement timeout of the gauges read from the database."
    )
    metrics_port: int = _setting(
        0,
        "A Celery worker or beat given a port serves its own metrics over HTTP (from a "
        "`PROMETHEUS_MULTIPROC_DIR` of its own); 0: no endpoint, its counters reach "
        "Prometheus through a web server sharing its directory (one host).",
    )
    metrics_address: str = _setting(
        "127.0.0.1", "The address that endpoint listens on (`0.0.0.0`: every interface)."
    )
    task_events: bool = _setting(
        True,
        "Celery task events, for Flower; false saves about 0.8 ms of worker CPU per run.",
    )
    workflow_modules: str = _setting(
        "",
        "Comma-separated modules that register the deployment's workflows; every process "
        "imports them when it starts.",
    )
    beat_schedule_file: str = _setting(
        str(STATE_DIR / "celerybeat-schedule"),
        "Where beat keeps its schedule's state; the directory must exist.",
        shown="`celerybeat-schedule` in `$AWOOOP_STATE_DIR` (default: `.awooop` in the "
        "working directory)",
    )

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
            problems = config_checks.relation_problems(settings)
        if problems:
            raise ConfigError("; ".join(problems))
        return settings

    def statement_timeout(self, role: str) -> float:
        """``AWOOOP_DB_STATEMENT_TIMEOUT_<ROLE>_SECONDS``."""
        return float(getattr(self, f"db_statement_timeout_{role}_seconds"))

    def lock_timeout(self, role: str) -> float:
        """``AWOOOP_DB_LOCK_TIMEOUT_<ROLE>_SECONDS``."""
        return float(getattr(self, f"db_lock_timeout_{role}_seconds"))


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

# --- Reading values -----------------------------------------------------------------------


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
            values[f.name] = config_checks.parse_value(f.name, str(f.type), raw.strip())
        except ValueError as exc:
            problems.append(f"{name}{exc}")
    return values, problems


def _missing_message(missing: list[str]) -> str:
    names = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
    verb = "are" if len(missing) > 1 else "is"
    return (
        f"{names} {verb} not set. Export {'them' if len(missing) > 1 else 'it'} (`awooop "
        f"config` lists every setting), or in a checkout of AwoooP run `make run`, which starts "
        f"embedded services and writes {STATE_DIR / 'env'}"
    )


# --- Masking ------------------------------------------------------------------------------

SECRET_SETTINGS = frozenset({"secret_key"})


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
    if isinstance(value, str) and (name in config_checks.URL_KINDS or name.endswith("_url")):
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
