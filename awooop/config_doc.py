"""docs/configuration.md, rendered from the settings themselves: each setting's description
and default (:class:`awooop.config.Settings`), its checks and the relations between settings
(:mod:`awooop.config_checks`), and what the defaults add up to (:mod:`awooop.domain.timing`).

``awooop config --markdown`` prints the page; ``make docs`` writes it, and a unit test fails
while the committed page differs from what this module renders.
"""

from __future__ import annotations

import re
from dataclasses import Field, fields

from awooop import config, config_checks
from awooop.config import Settings, variable
from awooop.domain import timing

REGENERATE = "make docs"

# The page's sections: a title, what the settings in it have in common, and the settings, in
# the order shown. Every setting is in exactly one (render() refuses otherwise).
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "Database and broker",
        "Where the state is (PostgreSQL, the only source of truth) and how run messages travel "
        "(the broker). Each process role (web, worker, the lease keeper, the maintenance "
        "sweeps) has its own statement and lock timeouts, sent with each connection unless "
        "`AWOOOP_DATABASE_SESSION_OPTIONS` is false.",
        (
            "database_url",
            "database_replica_url",
            "database_failover_check",
            "broker_url",
            "broker_sentinel_master",
            "broker_publish_timeout_seconds",
            "broker_publish_retry_seconds",
            "db_pool_size",
            "db_keeper_pool_size",
            "db_statement_timeout_web_seconds",
            "db_statement_timeout_worker_seconds",
            "db_statement_timeout_keeper_seconds",
            "db_statement_timeout_sweeps_seconds",
            "db_lock_timeout_web_seconds",
            "db_lock_timeout_worker_seconds",
            "db_lock_timeout_keeper_seconds",
            "db_lock_timeout_sweeps_seconds",
            "db_keepalives_idle_seconds",
            "db_keepalives_interval_seconds",
            "db_keepalives_count",
            "db_tcp_user_timeout_seconds",
            "database_prepared_statements",
            "database_session_options",
            "write_retries",
            "write_retry_base_seconds",
            "write_retry_max_seconds",
            "migrate_lock_timeout_seconds",
            "migrate_lock_retries",
            "migrate_wait_seconds",
        ),
    ),
    ("Secret key", "", ("secret_key",)),
    (
        "Web and ops console",
        "The gunicorn web servers: the HTTP API, the webhooks, the ops console, `/metrics`.",
        (
            "port",
            "web_workers",
            "web_threads",
            "access_log",
            "max_body_bytes",
            "auth_cache_seconds",
            "console_session_seconds",
        ),
    ),
    (
        "Lease and liveness",
        "A worker holds a run under a lease its lease keeper renews, and beats a liveness "
        "row of its own; the reaper hands a run on when its lease expired or when it has "
        "judged its worker dead (the rule: `awooop/domain/timing.py`; the protocol: "
        "[protocol.md](protocol.md)).",
        (
            "lease_ttl_seconds",
            "heartbeat_interval_seconds",
            "reaper_interval_seconds",
            "worker_liveness_interval_seconds",
            "worker_dead_after_seconds",
            "worker_belief_margin_seconds",
            "worker_watch_interval_seconds",
            "worker_prune_after_seconds",
        ),
    ),
    (
        "Workflows and steps",
        "",
        ("workflow_modules", "step_timeout_seconds", "workflow_unavailable_fail_after_seconds"),
    ),
    (
        "Approvals and manual intervention",
        "An approval step's own settings (its TTL, who may decide) are the workflow's "
        "([approvals.md](approvals.md)).",
        ("public_base_url", "manual_close_enabled"),
    ),
    ("Reruns", "", ("rerun_rate_per_second", "rerun_max_rate_per_second")),
    (
        "Quotas and rate limits",
        "",
        (
            "quota_retry_after_seconds",
            "rate_limit_redis_url",
            "rate_limit_timeout_seconds",
            "rate_limit_retry_seconds",
        ),
    ),
    (
        "Sweeps and retention",
        "Beat sends each sweep to the `maintenance` queue every interval; a pass that could "
        "not start before the next one is due is dropped, not stacked.",
        (
            "timer_interval_seconds",
            "timer_batch_size",
            "orphan_after_seconds",
            "orphan_interval_seconds",
            "orphan_batch_size",
            "dedupe_ttl_seconds",
            "prune_interval_seconds",
            "prune_batch_size",
            "run_retention_days",
            "outbox_retention_days",
            "retention_interval_seconds",
            "retention_batch_size",
            "sweep_pass_seconds",
            "beat_schedule_file",
        ),
    ),
    (
        "Scheduled workflows",
        "",
        ("schedule_interval_seconds", "schedule_max_lateness_seconds"),
    ),
    (
        "Outbox",
        "Outbound messages (replies, approval prompts, webhooks) are rows written with the "
        "state change that causes them, sent by the `notifications` queue and retried.",
        (
            "telegram_api_base",
            "line_api_base",
            "outbox_max_attempts",
            "outbox_base_delay_seconds",
            "outbox_max_delay_seconds",
            "outbox_send_timeout_seconds",
            "outbox_interval_seconds",
            "outbox_batch_size",
        ),
    ),
    (
        "Logs, metrics and tracing",
        "",
        (
            "log_level",
            "tracing",
            "readiness_timeout_seconds",
            "metrics_query_timeout_seconds",
            "metrics_port",
            "metrics_address",
            "task_events",
        ),
    ),
)


def render() -> str:
    """The whole page."""
    settings = {f.name: f for f in fields(Settings)}
    grouped = [name for _, _, names in GROUPS for name in names]
    if sorted(grouped) != sorted(settings):
        missing = sorted(set(settings) - set(grouped))
        twice = sorted({name for name in grouped if grouped.count(name) > 1})
        unknown = sorted(set(grouped) - set(settings))
        raise ValueError(
            f"config_doc.GROUPS must hold every setting once: missing {missing}, "
            f"twice {twice}, unknown {unknown}"
        )
    parts = [_INTRO.format(regenerate=REGENERATE)]
    sections = [title for title, _, _ in GROUPS] + [
        "URLs",
        "Relations between settings",
        "Checked when a process starts",
        "What the defaults add up to",
        "Other variables",
    ]
    parts.append("\n".join(f"- [{title}](#{_anchor(title)})" for title in sections))
    for title, intro, names in GROUPS:
        parts.append(f"## {title}")
        if intro:
            parts.append(intro)
        rows = [_row(settings[name]) for name in names]
        parts.append(
            "| variable | type | default | what it does | checks |\n|---|---|---|---|---|\n"
            + "\n".join(rows)
        )
    parts += [_urls(), _relations(), _STARTUP, _derived(Settings()), _other_variables()]
    return "\n\n".join(parts) + "\n"


_INTRO = """\
# Configuration

<!-- Generated from awooop/config.py by `{regenerate}`: edit the settings there, not here. -->

Every setting is an `AWOOOP_*` environment variable, read in one place (`awooop/config.py`,
where each one is described: this page is rendered from it) and checked when a process
starts: a web, worker, beat or Flower process with an invalid setting stops at once, with one
line naming every variable at fault and exit status 2. A variable that is unset or empty
takes the default. `awooop config` prints the effective configuration (secrets masked), with
where each value came from, and exits 2 when a process would refuse it.

Numbers are decimal (a whole number where the type says so); durations are in seconds unless
the name says `_DAYS`. Booleans are `true`/`false`, `1`/`0`, `yes`/`no` or `on`/`off`."""


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _code(rule: str) -> str:
    """``rule`` with the variables it names as code."""
    return re.sub(r"\bAWOOOP_[A-Z_]+\b", lambda m: f"`{m.group(0)}`", rule)


def _row(f: Field[object]) -> str:
    cells = (
        f"`{variable(f.name)}`",
        _kind(f),
        _default(f),
        str(f.metadata["doc"]),
        _checks(f.name, str(f.type)),
    )
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _kind(f: Field[object]) -> str:
    if f.type == "bool":
        return "boolean"
    if f.name in config_checks.URL_KINDS:
        return "URL"
    if f.type == "str":
        return "text"
    whole = f.type == "int"
    for suffix, unit in (("_seconds", "seconds"), ("_days", "days"), ("_bytes", "bytes")):
        if f.name.endswith(suffix):
            return f"{unit} (whole)" if whole else unit
    if f.name.endswith("_per_second"):
        return "per second"
    return "whole number" if whole else "number"


def _default(f: Field[object]) -> str:
    if f.metadata["shown"]:
        return str(f.metadata["shown"])
    value = f.default
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if not value:
            return "— (required)" if f.name in config.REQUIRED else "empty"
        return f"`{value}`"
    assert isinstance(value, int | float)
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    plain = _plainly(f.name, float(value))
    return f"{shown} ({plain})" if plain else shown


def _plainly(name: str, value: float) -> str:
    """A large default in the unit a reader thinks in (``3600`` seconds: ``1 h``)."""
    if name.endswith("_seconds") and value >= 60:
        for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
            if value % size == 0:
                count = value / size
                return f"{count:g} {'day' if unit == 'days' and count == 1 else unit}"
    if name.endswith("_bytes") and value >= 1024:
        for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
            if value % size == 0:
                return f"{value / size:g} {unit}"
    return ""


def _checks(name: str, kind: str) -> str:
    said = [config_checks.value_rule(name, kind)]
    if name in config.REQUIRED:
        said.insert(0, "required")
    said += [_code(r.rule) for r in config_checks.RELATIONS if name in r.names]
    return "; ".join(s for s in said if s) or "—"


def _urls() -> str:
    lines = ["## URLs", "", "What each URL setting accepts (checked when a process starts):", ""]
    for name, kind in config_checks.URL_KINDS.items():
        lines.append(f"- `{variable(name)}`: {config_checks.URL_RULES[kind]}.")
    lines += [
        "",
        "`redis://`, `rediss://` (TLS) and `sentinel://` are Celery's Redis transports; "
        "`amqp://`, `amqps://` (TLS) and `pyamqp://` its RabbitMQ ones. Passwords in URLs are "
        "masked wherever a URL is shown (`awooop config`, the start-up log line, every error "
        "message).",
        "",
        "A `sentinel://` URL names Redis Sentinels, one per part "
        "(`sentinel://s1:26379;sentinel://s2:26379;sentinel://s3:26379`); the first part's "
        "password and database number (`/0`) are the master's, as Celery's Sentinel transport "
        "reads them. `AWOOOP_BROKER_SENTINEL_MASTER` names the master they monitor. Celery (web, "
        "workers, beat) gets it as `broker_transport_options['master_name']`; the run sender, "
        "`/readyz` and the rate limiter ask the sentinels for that master on each new "
        "connection, so after a failover their next connection reaches the promoted replica. A "
        "push that fails meanwhile is the orphan sweep's, as with any broker outage.",
    ]
    return "\n".join(lines)


def _relations() -> str:
    lines = [
        "## Relations between settings",
        "",
        "Checked once every value is valid; a process refuses to start while one is broken:",
        "",
    ]
    lines += [f"- {_code(relation.rule)}." for relation in config_checks.RELATIONS]
    return "\n".join(lines)


_STARTUP = """\
## Checked when a process starts

Beyond the values (`awooop/bootstrap.py`): every module of `AWOOOP_WORKFLOW_MODULES` imports;
every workflow's own `lease_ttl_seconds` is at least three `AWOOOP_HEARTBEAT_INTERVAL_SECONDS`;
`AWOOOP_TRACING` other than `off` needs the `otel` extra installed. A web, worker or beat
process also refuses a database whose schema its migrations have not reached
(`awooop migrate` first)."""


def _derived(s: Settings) -> str:
    takeover = timing.takeover_within(s.worker_dead_after_seconds, s.worker_watch_interval_seconds)
    belief = timing.belief_lasts(s.worker_dead_after_seconds, s.worker_belief_margin_seconds)
    noticed = s.db_keepalives_idle_seconds + (
        s.db_keepalives_interval_seconds * s.db_keepalives_count
    )
    figures = (
        f"**A dead worker's runs** are handed back at most {takeover:g} s after its last "
        "committed liveness beat, so at most that long after it died: "
        "`AWOOOP_WORKER_DEAD_AFTER_SECONDS` + 2 × `AWOOOP_WORKER_WATCH_INTERVAL_SECONDS`. The "
        "reaper's first watch pass after that beat reads it (within one watch interval) and "
        "notes when, on its own clock; the first pass at least "
        f"{s.worker_dead_after_seconds:g} s after that note (at most one interval more) judges "
        "the worker dead and hands its RUNNING runs back, their messages sent, and an idle "
        "worker claims each within moments. A watch pass that starts late (the maintenance "
        "worker busy with another sweep) adds its delay (`takeover_within` in "
        "`awooop/domain/timing.py`).",
        f"**A worker cut off from the database** stops believing it holds its runs {belief:g} s "
        "after the start of its last committed liveness beat "
        "(`AWOOOP_WORKER_DEAD_AFTER_SECONDS` − `AWOOOP_WORKER_BELIEF_MARGIN_SECONDS`), before "
        "the reaper may judge it dead.",
        "**A lease that is not renewed** while its worker's liveness beats go on expires "
        f"{s.lease_ttl_seconds:g} s after its last renewal, and the reaper's next full pass, at "
        f"most {s.reaper_interval_seconds:g} s later, takes the run back.",
        f"**A database peer that vanished** (no reset, no reply) is noticed in about {noticed:g} "
        "s: `AWOOOP_DB_KEEPALIVES_IDLE_SECONDS` + `AWOOOP_DB_KEEPALIVES_INTERVAL_SECONDS` × "
        "`AWOOOP_DB_KEEPALIVES_COUNT`.",
    )
    return "## What the defaults add up to\n\n" + "\n".join(f"- {line}" for line in figures)


def _other_variables() -> str:
    rows = (
        (
            ("AWOOOP_STATE_DIR",),
            f"`{config.ENV_FILE.parent}` in the working directory",
            "Where `awooop dev up` keeps the embedded PostgreSQL and Redis and writes the env "
            "file (`env`) that `make run`'s processes read; the `awooop` command reads "
            "`$AWOOOP_STATE_DIR/env` when the environment names no database, broker or key.",
        ),
        (
            ("AWOOOP_EMBEDDED_DATABASE_URL", "AWOOOP_EMBEDDED_BROKER_URL"),
            "—",
            "Written to that env file by `awooop dev up`: the embedded services' URLs.",
        ),
        (
            (config.API_URL_VARIABLE,),
            f"`{config.DEFAULT_API_URL}`",
            "The web an `awooop runs`, `approvals` or `workers` command calls "
            "([client.md](client.md)).",
        ),
        (
            (config.API_TOKEN_VARIABLE,),
            "—",
            "The API token those commands send.",
        ),
        (
            ("PROMETHEUS_MULTIPROC_DIR",),
            "—",
            "Where every process writes its metric files (prometheus_client's own variable): "
            "shared by the processes of one host, or one per worker and beat that serves its "
            "own (`AWOOOP_METRICS_PORT`); `awooop metrics reset` empties it before they start.",
        ),
        (
            ("FLOWER_BASIC_AUTH",),
            "—",
            "Flower's `user:password` (Flower's own variable); Flower refuses to start without it.",
        ),
    )
    table = "\n".join(
        f"| {' / '.join(f'`{name}`' for name in names)} | {default} | {doc} |"
        for names, default, doc in rows
    )
    return f"""\
## Other variables

Read by the processes or the `awooop` command, but not settings (`awooop config` shows the
last two, Flower's password masked):

| variable | default | what it does |
|---|---|---|
{table}

The test, fault and benchmark suites read variables of their own (`AWOOOP_TEST_*`,
`AWOOOP_CHAOS_*`, `AWOOOP_CLUSTER_*`, `AWOOOP_WHEEL_*`…); no process of a deployment does."""
