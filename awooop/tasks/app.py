"""The Celery application (``celery -A awooop.tasks.app ...``).

Importing this module reads no setting. Celery reads ``celeryconfig`` the first time it needs
its configuration (``config_from_object`` is lazy), which needs only ``AWOOOP_BROKER_URL``:
``celery -A awooop.tasks.app inspect ping`` asks for nothing else. A worker or beat checks the
whole configuration when it starts (:class:`Loader`), before it connects anywhere, and exits
with the message naming the variable.
"""

from __future__ import annotations

import logging
import signal

from celery import Celery
from celery.loaders.app import AppLoader
from celery.signals import worker_process_init, worker_ready

from awooop import db, logs
from awooop.config import ConfigError, get_settings
from awooop.domain import workflow
from awooop.workflows import registry


class Loader(AppLoader):
    """Celery's loader, plus what a worker or beat does when it starts (``on_worker_init``)."""

    def on_worker_init(self) -> None:
        try:
            settings = get_settings()
            # A worker whose workflows' leases are shorter than three renewals refuses to start.
            registry.import_modules(settings.workflow_module_list)
            workflow.check_leases(registry.all_workflows(), settings.heartbeat_interval_seconds)
        except (ConfigError, workflow.LeaseTooShort) as exc:
            raise SystemExit(f"awooop: error: {exc}") from None
        logs.configure(settings.log_level)
        logs.quiet_sweep_passes()


app = Celery(
    "awooop",
    loader=Loader,
    include=["awooop.tasks.runs", "awooop.tasks.sweeps", "awooop.tasks.notifications"],
)
app.config_from_object("celeryconfig")


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
