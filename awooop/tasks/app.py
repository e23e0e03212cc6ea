"""The Celery application (``celery -A awooop.tasks.app ...``)."""

from __future__ import annotations

import logging
import signal

from celery import Celery
from celery.signals import worker_process_init, worker_ready

from awooop import db, logs
from awooop.config import get_settings
from awooop.domain import workflow
from awooop.tasks import observability
from awooop.workflows import registry

app = Celery(
    "awooop", include=["awooop.tasks.runs", "awooop.tasks.sweeps", "awooop.tasks.notifications"]
)
app.config_from_object("celeryconfig")
# Metrics endpoint, sweep and beat counters, JSON logs (awooop.tasks.observability).
observability.install(app)

_settings = get_settings()
logs.configure(_settings.log_level)
registry.import_modules(_settings.workflow_module_list)
# A worker whose workflows' leases are shorter than three renewals refuses to start.
workflow.check_leases(registry.all_workflows(), _settings.heartbeat_interval_seconds)


@worker_process_init.connect
def _after_fork(**_: object) -> None:
    # Connections inherited from the parent must not be shared across processes.
    db.dispose_after_fork()
    # A stop request reaches the whole process group; the parent's warm shutdown lets the
    # current step finish, so the child ignores SIGTERM (a crash is survived anyway).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@worker_ready.connect
def _check_definitions(**_: object) -> None:
    from awooop.engine import startup

    try:
        startup.missing_definitions(db.get_engine(db.WORKER))
    except Exception:  # a start-up check must not keep the worker from starting
        logging.getLogger("awooop.tasks").exception(
            "could not check workflow definitions", extra={"action": "startup_check_failed"}
        )
