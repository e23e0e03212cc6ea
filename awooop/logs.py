"""Structured JSON logs. Every line carries an ``action`` plus run/project/worker ids when known.

Usage::

    log.info("run claimed", extra={"action": "run_claimed", "run_id": run_id})

    with logs.bound(run_id=..., project_id=..., worker_id=..., traceparent=...):
        ...  # every awooop log line in here carries these fields

Fields given with :func:`bound` live in a context variable, so the lines a step handler
writes while a worker drives a run carry the run's ids and its ``traceparent`` without the
handler passing them. A field given in ``extra`` wins over a bound one.

Nothing secret is ever a field: no token, channel secret, request header or body.

The servers' own lines are JSON too, one format per stream: Celery's and its libraries'
(:func:`configure_root`, from the worker's and beat's logging set-up) and gunicorn's
(:func:`gunicorn_logconfig`: its error log on stderr, its access log on stdout).
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from types import MappingProxyType

# The LogRecord attributes that are not caller-supplied context.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}

_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "awooop_log_context", default=MappingProxyType({})
)


def bind(**fields: object) -> contextvars.Token[Mapping[str, object]]:
    """Add fields to every log line of this context (None values are left out).

    Returns the token :func:`unbind` takes; prefer :func:`bound` where a ``with`` fits.
    """
    added = {k: v for k, v in fields.items() if v is not None}
    return _context.set({**_context.get(), **added})


def unbind(token: contextvars.Token[Mapping[str, object]]) -> None:
    _context.reset(token)


@contextmanager
def bound(**fields: object) -> Iterator[None]:
    token = bind(**fields)
    try:
        yield
    finally:
        unbind(token)


def context() -> Mapping[str, object]:
    """The fields bound in this context."""
    return _context.get()


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(_context.get())
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str = "INFO") -> None:
    """Route the ``awooop`` loggers to stderr as JSON lines (idempotent)."""
    logger = logging.getLogger("awooop")
    if any(isinstance(h.formatter, JsonFormatter) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def configure_root(level: str | int = "INFO") -> None:
    """Every other logger's lines — Celery's, kombu's, Python's warnings — as JSON on stderr:
    the root logger gets one JSON handler in place of whatever it had."""
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)


def gunicorn_logconfig(access_log: bool) -> dict[str, object]:
    """gunicorn's ``logconfig_dict``: its error log (and any library's lines) as JSON on
    stderr, its access log as JSON on stdout — or nowhere when ``access_log`` is off."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            },
            "stdout": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stdout",
            },
        },
        "root": {"level": "INFO", "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
            "gunicorn.access": {
                "level": "INFO",
                "handlers": ["stdout"] if access_log else [],
                "propagate": False,
            },
        },
    }


# Celery's own lines about each sweep pass: beat sending it, the maintenance worker receiving
# it and its result. Passes run every few seconds, so at INFO these lines would bury the web's,
# the runs' and the errors; a pass that changed something logs its own awooop line
# (``timers_fired``, ``orphans_resent``, ``run_reaped``, ...), and a failed pass keeps its level.
SWEEP_TASK_PREFIX = "awooop.sweeps."
_CELERY_TASK_LOGGERS = ("celery.beat", "celery.worker.strategy", "celery.app.trace")


def _names_a_sweep(record: logging.LogRecord) -> bool:
    data = getattr(record, "data", None)  # celery.app.trace and the worker's strategy
    if isinstance(data, Mapping):
        return str(data.get("name", "")).startswith(SWEEP_TASK_PREFIX)
    args = record.args if isinstance(record.args, tuple) else ()  # celery.beat
    return any(isinstance(a, str) and a.startswith(SWEEP_TASK_PREFIX) for a in args)


class SweepPassesAtDebug(logging.Filter):
    """Logs Celery's INFO lines about ``awooop.sweeps.*`` tasks at DEBUG instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO or not _names_a_sweep(record):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


def quiet_sweep_passes() -> None:
    """Install :class:`SweepPassesAtDebug` on Celery's task loggers (idempotent)."""
    for name in _CELERY_TASK_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, SweepPassesAtDebug) for f in logger.filters):
            logger.addFilter(SweepPassesAtDebug())
