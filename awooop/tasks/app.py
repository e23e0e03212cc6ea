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
import threading
from pathlib import Path

from celery import Celery, beat, platforms
from celery.loaders.app import AppLoader
from celery.signals import (
    beat_init,
    celeryd_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
)

from awooop import bootstrap, config, db, failover, logs, migrate, telemetry
from awooop.tasks import observability

# How long a pool process that is stopping waits for the finishes of the runs it drove.
FINISH_DRAIN_SECONDS = 10.0


class Loader(AppLoader):
    """Celery's loader, plus what a worker or beat does when it starts (``on_worker_init``)."""

    def on_worker_init(self) -> None:
        # Invalid settings, a workflow module that does not exist, or a workflow whose lease is
        # shorter than three renewals: the process stops here, before it connects anywhere,
        # with one line naming the variable (exit status 2).
        settings = bootstrap.settings_or_exit()
        logs.configure(settings.log_level)
        logs.quiet_sweep_passes()
        # A schema older than this release needs (its `awooop migrate` has not run yet): the
        # process stops here with one line saying so (exit status 2), rather than fail on
        # every task that touches what the migration adds.
        migrate.check_schema_or_exit(settings, "worker")
        # A primary whose standbys are all asynchronous could lose acknowledged events and
        # issue a lease epoch twice on failover: said once here (or, with
        # AWOOOP_DATABASE_FAILOVER_CHECK=refuse, the process stops with status 2).
        failover.check_or_exit(settings, "worker")


class Scheduler(beat.PersistentScheduler):
    """Celery's scheduler (``beat_scheduler``), which keeps the schedule's state in
    ``AWOOOP_BEAT_SCHEDULE_FILE``: a file in a directory that does not exist (the default,
    ``.awooop/`` under the working directory, outside a checkout) stops beat here with one
    line naming the variable (exit status 2), rather than a traceback from the shelve."""

    def setup_schedule(self) -> None:
        directory = Path(self.schedule_filename).absolute().parent
        if not directory.is_dir():
            bootstrap.refuse(
                f"AWOOOP_BEAT_SCHEDULE_FILE={self.schedule_filename}: the directory {directory} "
                "does not exist (create it, or point the variable at one that does)"
            )
        super().setup_schedule()


app = Celery(
    "awooop",
    loader=Loader,
    include=["awooop.tasks.runs", "awooop.tasks.sweeps", "awooop.tasks.notifications"],
)
app.config_from_object("celeryconfig")
# Metrics endpoint, sweep and beat counters, JSON logs (awooop.tasks.observability).
observability.install(app)


@celeryd_init.connect
def _log_worker_settings(**_: object) -> None:
    bootstrap.log_settings(config.get_settings(), "worker")


@beat_init.connect
def _log_beat_settings(**_: object) -> None:
    bootstrap.log_settings(config.get_settings(), "beat")


@beat_init.connect
def _stop_beat_on_signal(sender: beat.Service, **_: object) -> None:
    # Celery's own SIGTERM/SIGINT handler closes the schedule file, then raises SystemExit.
    # Python runs a handler between any two bytecodes of the main thread, a finalizer's
    # included, and an exception raised in a finalizer is only reported: beat then ticks on
    # over the closed file and dies with a traceback. This handler only asks the loop to end
    # (raising SystemExit to cut its sleep short); the loop's way out saves and closes the file.
    def stop(signum: int, frame: object) -> None:
        sender._is_shutdown.set()  # Service.stop() would log from inside the handler
        raise SystemExit()

    if threading.current_thread() is threading.main_thread():  # not a beat in a thread
        platforms.signals.update(SIGTERM=stop, SIGINT=stop)


@worker_process_init.connect
def _after_fork(**_: object) -> None:
    # Connections inherited from the parent must not be shared across processes.
    db.dispose_after_fork()
    # A stop request reaches the whole process group; the parent's warm shutdown lets the
    # current step finish, so the child ignores SIGTERM (a crash is survived anyway).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Spans of the runs and sends this pool process drives (AWOOOP_TRACING), exported by a
    # thread of its own: started after the fork.
    telemetry.start(config.get_settings(), "worker")
    bootstrap.freeze_startup_objects()


@worker_process_shutdown.connect
def _finish_and_flush(**_: object) -> None:
    from awooop.engine import finisher

    # The runs whose last step ran end before the process does (or their leases recover
    # them, if the database does not answer in time).
    finisher.drain(FINISH_DRAIN_SECONDS)
    telemetry.shutdown()


@worker_ready.connect
def _check_definitions(**_: object) -> None:
    from awooop.engine import startup

    try:
        startup.missing_definitions(db.get_engine(db.WORKER))
    except Exception:  # a start-up check must not keep the worker from starting
        logging.getLogger("awooop.tasks").exception(
            "could not check workflow definitions", extra={"action": "startup_check_failed"}
        )
