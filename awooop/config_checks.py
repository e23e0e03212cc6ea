"""What each setting's value must be, and what the settings must keep between them.

:meth:`awooop.config.Settings.from_env` runs these checks on every value it reads
(:func:`parse_value`), then, when each value is valid, the relations (:data:`RELATIONS`).
Each check is also said in words here (:func:`value_rule`, :attr:`Relation.rule`), next to
the code that enforces it, for the configuration reference (:mod:`awooop.config_doc`).

A message continues the variable's name (``AWOOOP_PORT=0 is not a port number…``) and
never shows a secret: URLs through :func:`awooop.masking.mask_url`, keys not at all.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from awooop.domain import timing
from awooop.domain.numbers import decimal_number, whole_number
from awooop.masking import mask_url

if TYPE_CHECKING:
    from awooop.config import Settings

# Numbers must be positive, except these (0 means "never cache", "do not retry", "no endpoint").
MAY_BE_ZERO = frozenset(
    {"auth_cache_seconds", "write_retries", "metrics_port", "migrate_lock_retries"}
)
PORTS = {"port": (1, 65535), "metrics_port": (0, 65535)}
TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TRACING_MODES = ("off", "otlp", "console")
# What a starting process does when the database could lose commits on failover (awooop.failover).
FAILOVER_CHECKS = ("warn", "refuse", "off")
_MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# The database drivers the package ships (psycopg2); SQLAlchemy reads "postgresql" as it.
DATABASE_DRIVERS = ("postgresql+psycopg2", "postgresql")
# Celery's broker transports for Redis (plain, TLS, Sentinel) and RabbitMQ.
BROKER_SCHEMES = ("redis", "rediss", "sentinel", "amqp", "amqps", "pyamqp")
# What the rate limiter can use (awooop.ratelimit, over awooop.redis_client).
REDIS_SCHEMES = ("redis", "rediss", "unix", "sentinel")
# The settings that are URLs, by the check they get.
URL_KINDS = {
    "database_url": "database",
    "database_replica_url": "database",
    "broker_url": "broker",
    "rate_limit_redis_url": "redis",
    "telegram_api_base": "http",
    "line_api_base": "http",
    "public_base_url": "http",
}
_DATABASE_EXAMPLE = "postgresql+psycopg2://user:password@host:5432/database"


def variable(name: str) -> str:
    """The environment variable of the setting ``name`` (``AWOOOP_<NAME>``)."""
    return f"AWOOOP_{name.upper()}"


def _schemes(schemes: tuple[str, ...]) -> str:
    shown = [f"`{s}://`" for s in schemes]
    return f"{', '.join(shown[:-1])} or {shown[-1]}"


# The URLs each kind of URL setting accepts, in words.
URL_RULES = {
    "database": f"a {_schemes(DATABASE_DRIVERS)} URL naming a database (an `@` in the user "
    "name or password written `%40`)",
    "broker": f"a {_schemes(BROKER_SCHEMES)} URL, or several separated by `;` (fail-over; "
    "for `sentinel://`, one per sentinel, none of another scheme); a Redis URL's path is a "
    "database number (`/0`)",
    "redis": f"a {_schemes(REDIS_SCHEMES)} URL (`sentinel://`: one per sentinel, separated by `;`)",
    "http": "an `http://` or `https://` URL with a host",
}


# --- One value ----------------------------------------------------------------------------


def parse_value(name: str, kind: str, raw: str) -> Any:
    """The value of the setting ``name`` (of type ``kind``: ``int``, ``float``, ``bool`` or
    ``str``) given as ``raw``; a ValueError's message continues ``AWOOOP_<NAME>``."""
    if kind == "bool":
        if raw.lower() in TRUE:
            return True
        if raw.lower() in FALSE:
            return False
        raise ValueError(f"={raw!r} is not a boolean (use true/false, 1/0, yes/no or on/off)")
    if kind in ("int", "float"):
        return _number(name, kind, raw)
    if name == "secret_key":
        return _fernet_keys(raw)  # never echoes the value
    if name == "log_level":
        if raw.upper() not in LOG_LEVELS:
            raise ValueError(f"={raw!r} is not a log level ({', '.join(LOG_LEVELS)})")
        return raw.upper()
    if name == "tracing":
        if raw.lower() not in TRACING_MODES:
            raise ValueError(f"={raw!r} is not one of {', '.join(TRACING_MODES)}")
        return raw.lower()
    if name == "database_failover_check":
        if raw.lower() not in FAILOVER_CHECKS:
            raise ValueError(f"={raw!r} is not one of {', '.join(FAILOVER_CHECKS)}")
        return raw.lower()
    if name == "workflow_modules":
        for module in (m.strip() for m in raw.split(",")):
            if module and not _MODULE.fullmatch(module):
                raise ValueError(f": {module!r} is not a module name (comma-separated names)")
    elif name in URL_KINDS:
        _check_url(URL_KINDS[name], raw)
    return raw


def value_rule(name: str, kind: str) -> str:
    """What :func:`parse_value` accepts for the setting ``name``, in words ("" for any text)."""
    if kind == "bool":
        return "true/false, 1/0, yes/no or on/off"
    if kind in ("int", "float"):
        number = "a whole number" if kind == "int" else "a number"
        if name in PORTS:
            low, high = PORTS[name]
            return (
                f"{low} (no endpoint) or a port, 1–{high}" if low == 0 else f"a port, {low}–{high}"
            )
        return f"{number} {'≥ 0' if name in MAY_BE_ZERO else '> 0'}"
    if name == "secret_key":
        return (
            "Fernet keys (32 url-safe base64-encoded bytes: `awooop dev key` makes one), "
            "comma-separated, newest first, none repeated"
        )
    if name == "log_level":
        return f"one of {', '.join(LOG_LEVELS)} (any case)"
    if name == "tracing":
        return f"one of {', '.join(TRACING_MODES)} (any case)"
    if name == "database_failover_check":
        return f"one of {', '.join(FAILOVER_CHECKS)} (any case)"
    if name == "workflow_modules":
        return "comma-separated module names"
    return URL_RULES.get(URL_KINDS.get(name, ""), "")


def _number(name: str, kind: str, raw: str) -> float:
    text = raw.strip()
    number = whole_number(text) if kind == "int" else decimal_number(text)
    if number is None:
        what = "a whole number" if kind == "int" else "a number"
        raise ValueError(f"={raw!r} is not {what}")
    if not math.isfinite(number):
        raise ValueError(f"={raw!r} is not a finite number")
    if name in PORTS:
        low, high = PORTS[name]
        if not low <= number <= high:
            zero = ", or 0 for no endpoint" if low == 0 else ""
            raise ValueError(f"={raw} is not a port number (1-{high}{zero})")
    if name in MAY_BE_ZERO and number < 0:
        raise ValueError(f"={raw} must be 0 or more")
    if name not in MAY_BE_ZERO and number <= 0:
        raise ValueError(f"={raw} must be positive")
    return number


def _fernet_keys(raw: str) -> str:
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
        _check_database_url(raw, shown)
    elif kind == "http":
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(raw)
            parts.port  # noqa: B018 - parses the port, raising on a bad one
        except ValueError:
            raise ValueError(f"={shown} is not a URL (check its host and port)") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"={shown} is not an http:// or https:// URL with a host")
    else:
        _check_broker_url(kind, raw, shown)


def _check_database_url(raw: str, shown: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    # The parsers' own messages may quote part of the URL (a password), so none is shown.
    try:
        url = make_url(raw)
    except ArgumentError:
        raise ValueError(f"={shown} is not a database URL; use {_DATABASE_EXAMPLE}") from None
    except ValueError:
        raise ValueError(f"={shown}: its port is not a number; use {_DATABASE_EXAMPLE}") from None
    if url.drivername not in DATABASE_DRIVERS:
        raise ValueError(
            f"={shown}: driver {url.drivername!r} is not supported; use {_DATABASE_EXAMPLE}"
        )
    if url.host and "@" in url.host:
        raise ValueError(
            f"={shown} has more than one '@' before its host: write an '@' in the user "
            "name or password as %40"
        )
    if not url.database:
        raise ValueError(f"={shown} names no database; use {_DATABASE_EXAMPLE}")


def _check_broker_url(kind: str, raw: str, shown: str) -> None:
    """A broker URL (``kind`` "broker": several may be separated by ``;``, Celery's fail-over)
    or the rate limiter's Redis URL (``kind`` "redis")."""
    from kombu.utils.url import url_to_parts

    from awooop import redis_client

    schemes = BROKER_SCHEMES if kind == "broker" else REDIS_SCHEMES
    if any(redis_client.is_sentinel_url(part) for part in raw.split(";")):
        try:
            redis_client.parse_sentinel_url(raw)
        except ValueError as exc:
            raise ValueError(f"={shown}: {exc}") from None
        return
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


# --- Between settings ---------------------------------------------------------------------


@dataclass(frozen=True)
class Relation:
    """A rule between settings: ``names`` are the settings it binds, ``rule`` says it (the
    variables named), and ``problem`` is the message when ``settings`` break it (or None)."""

    names: tuple[str, ...]
    rule: str
    problem: Callable[[Settings], str | None]


def _renewals_fit(s: Settings) -> str | None:
    interval, ttl = s.heartbeat_interval_seconds, s.lease_ttl_seconds
    if timing.renewals_fit(ttl, interval):
        return None
    return (
        f"AWOOOP_HEARTBEAT_INTERVAL_SECONDS={interval:g} must be positive and at most a "
        f"third of AWOOOP_LEASE_TTL_SECONDS={ttl:g} (at most {ttl / timing.RENEWALS_PER_TTL:g}): "
        "a lease must survive two failed renewals"
    )


def _at_most(low: str, high: str) -> Relation:
    """``low`` ≤ ``high``."""

    def problem(s: Settings) -> str | None:
        a, b = getattr(s, low), getattr(s, high)
        if a <= b:
            return None
        return f"{variable(low)}={a:g} must be at most {variable(high)}={b:g}"

    return Relation((low, high), f"{variable(low)} ≤ {variable(high)}", problem)


def _reaper_within_a_lease(s: Settings) -> str | None:
    ttl, reaper = s.lease_ttl_seconds, s.reaper_interval_seconds
    if reaper < ttl:
        return None
    return (
        f"AWOOOP_REAPER_INTERVAL_SECONDS={reaper:g} must be less than "
        f"AWOOOP_LEASE_TTL_SECONDS={ttl:g}: an expired lease must be found within a lease"
    )


def _tick_survives_a_late_pass(s: Settings) -> str | None:
    interval, lateness = s.schedule_interval_seconds, s.schedule_max_lateness_seconds
    if lateness >= 2 * interval:
        return None
    return (
        f"AWOOOP_SCHEDULE_MAX_LATENESS_SECONDS={lateness:g} must be at least twice "
        f"AWOOOP_SCHEDULE_INTERVAL_SECONDS={interval:g}: a tick must survive one late pass"
    )


def _sentinel_master_named(s: Settings) -> str | None:
    from awooop import redis_client

    if s.broker_sentinel_master:
        return None
    for name in ("broker_url", "rate_limit_redis_url"):
        if redis_client.is_sentinel_url(getattr(s, name)):
            return (
                f"{variable(name)} is a sentinel:// URL: set AWOOOP_BROKER_SENTINEL_MASTER to "
                "the name of the master its sentinels monitor"
            )
    return None


_RHO = timing.CLOCK_RATE_BOUND
RELATIONS = (
    Relation(
        ("heartbeat_interval_seconds", "lease_ttl_seconds"),
        f"AWOOOP_HEARTBEAT_INTERVAL_SECONDS ≤ AWOOOP_LEASE_TTL_SECONDS / "
        f"{timing.RENEWALS_PER_TTL}: a lease survives two failed renewals",
        _renewals_fit,
    ),
    Relation(
        ("worker_belief_margin_seconds", "worker_dead_after_seconds"),
        f"AWOOOP_WORKER_BELIEF_MARGIN_SECONDS > 2 × {_RHO:g} / {1 + _RHO:g} × "
        "AWOOOP_WORKER_DEAD_AFTER_SECONDS (clocks whose rates are within "
        f"{_RHO * 100:g} % of real time): a worker stops believing it holds its runs before the "
        "reaper may judge it dead",
        lambda s: timing.margin_problem(
            s.worker_dead_after_seconds, s.worker_belief_margin_seconds
        ),
    ),
    Relation(
        (
            "worker_dead_after_seconds",
            "worker_belief_margin_seconds",
            "worker_liveness_interval_seconds",
        ),
        "AWOOOP_WORKER_DEAD_AFTER_SECONDS − AWOOOP_WORKER_BELIEF_MARGIN_SECONDS ≥ "
        f"{timing.RENEWALS_PER_TTL - 1} × AWOOOP_WORKER_LIVENESS_INTERVAL_SECONDS: a live "
        "worker's belief survives a failed liveness beat",
        lambda s: timing.belief_problem(
            s.worker_liveness_interval_seconds,
            s.worker_dead_after_seconds,
            s.worker_belief_margin_seconds,
        ),
    ),
    Relation(
        ("reaper_interval_seconds", "lease_ttl_seconds"),
        "AWOOOP_REAPER_INTERVAL_SECONDS < AWOOOP_LEASE_TTL_SECONDS: an expired lease is found "
        "within a lease",
        _reaper_within_a_lease,
    ),
    Relation(
        ("schedule_max_lateness_seconds", "schedule_interval_seconds"),
        "AWOOOP_SCHEDULE_MAX_LATENESS_SECONDS ≥ 2 × AWOOOP_SCHEDULE_INTERVAL_SECONDS: a tick "
        "survives one late pass",
        _tick_survives_a_late_pass,
    ),
    Relation(
        ("broker_sentinel_master", "broker_url", "rate_limit_redis_url"),
        "AWOOOP_BROKER_SENTINEL_MASTER is set when AWOOOP_BROKER_URL or "
        "AWOOOP_RATE_LIMIT_REDIS_URL is a `sentinel://` URL",
        _sentinel_master_named,
    ),
    _at_most("rerun_rate_per_second", "rerun_max_rate_per_second"),
    _at_most("write_retry_base_seconds", "write_retry_max_seconds"),
    _at_most("outbox_base_delay_seconds", "outbox_max_delay_seconds"),
)


def relation_problems(settings: Settings) -> list[str]:
    """What is wrong between settings that are each valid, in :data:`RELATIONS`' order."""
    found = (relation.problem(settings) for relation in RELATIONS)
    return [problem for problem in found if problem]
