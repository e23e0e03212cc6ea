"""Process start-up: the settings of a starting process (web, worker, beat, Flower) or its
exit, what it checks beyond the values (its workflow modules import, every workflow's lease
fits the renewal interval), its start-up log line, the report of ``awooop config`` (the
settings and what a start would refuse), and the garbage collector told what lives as long
as the process.

Apart from :mod:`awooop.config`, which only reads and checks the values: the checks here
import the workflows (:mod:`awooop.workflows.registry`), and the workflows import the
settings.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import Any, NoReturn

from awooop import config, telemetry
from awooop.config import ConfigError, Settings, get_settings
from awooop.domain import workflow
from awooop.workflows import registry

# The programs that run the Procfile's processes (``python -m celery`` included).
PROCESS_PROGRAMS = frozenset({"celery", "gunicorn"})


def settings_or_exit() -> Settings:
    """The settings of a starting process (web, worker, beat, Flower), checked with what
    they name: the workflow modules import, and every workflow's lease fits the renewal
    interval.

    In a process started by its program (gunicorn, celery), an invalid configuration ends it
    here, before it does anything: one line on stderr naming the variable, exit status 2, no
    traceback. Code that merely imports the package (tests, a Python shell) gets the
    :class:`ConfigError` instead.
    """
    try:
        settings = get_settings()
        check_startup(settings)
    except (ConfigError, workflow.LeaseTooShort) as exc:
        if _program() not in PROCESS_PROGRAMS:
            raise
        refuse(str(exc))
    return settings


def refuse(problem: str) -> NoReturn:
    """End a starting process over its configuration: one line on stderr, exit status 2."""
    print(f"awooop: configuration error: {problem}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _program() -> str:
    """The name of the program this interpreter runs (``celery`` for ``python -m celery``)."""
    main = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return main.parent.name if main.name == "__main__.py" else main.name


def check_startup(settings: Settings) -> None:
    """What a process checks beyond the values: the workflow modules import
    (:class:`ConfigError`), tracing is off unless OpenTelemetry is installed
    (:class:`ConfigError`), and every workflow's lease fits three renewal intervals
    (:class:`~awooop.domain.workflow.LeaseTooShort`)."""
    telemetry.check(settings)
    registry.import_modules(settings.workflow_module_list)
    workflow.check_leases(registry.all_workflows(), settings.heartbeat_interval_seconds)


def log_settings(settings: Settings, process: str) -> None:
    """One start-up line saying which database and broker this process uses (masked), and
    how it talks to the database: where its statement and lock timeouts come from, and
    whether hot statements are prepared (both off behind a transaction-pooling PgBouncer)."""
    # Under the logger the line has always had.
    logging.getLogger("awooop.config").info(
        "settings loaded",
        extra={
            "action": "settings_loaded",
            "role": process,
            "database_url": config.mask_url(settings.database_url),
            "broker_url": config.mask_url(settings.broker_url),
            "database_timeouts": (
                "sent as session options"
                if settings.database_session_options
                else "not sent: set on the server (ALTER ROLE ... SET, or the pooler's "
                "connect_query)"
            ),
            "prepared_statements": settings.database_prepared_statements,
        },
    )


def freeze_startup_objects() -> None:
    """Once a serving process (a web process, a worker's pool process) has loaded what it
    serves with: move everything alive now out of the garbage collector's sight.

    Modules, the application, workflow definitions and pools live as long as the process,
    yet every full collection walked them all: tens of milliseconds of CPU during which the
    process served nothing (in a web process, every request it held waited). After this a
    full collection walks only what serving made since. The garbage made so far is
    collected first, so nothing collectable is kept.
    """
    gc.collect()
    gc.freeze()


def describe(
    environment: config.Environment, required: tuple[str, ...] = config.REQUIRED
) -> dict[str, Any]:
    """What ``awooop config`` prints: :func:`awooop.config.describe`, and when the values are
    valid, what a starting process would refuse beyond them (:func:`check_startup`)."""
    report = config.describe(environment, required)
    if not report["problems"]:
        try:
            check_startup(Settings.from_env(environment.values, required))
        except (ConfigError, workflow.LeaseTooShort) as exc:
            report["problems"] = str(exc).split("; ")
    return report
