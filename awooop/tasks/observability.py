"""What a Celery worker or beat shows of itself: its metrics endpoint, its sweep and beat
counters, and Celery's own lines as JSON.

* **Metrics directory.** A worker takes its ``PROMETHEUS_MULTIPROC_DIR`` in its main process
  before the pool forks (:class:`MetricsEndpoint`), beat when it starts: as its owner when
  ``AWOOOP_METRICS_PORT`` is set — it deletes earlier processes' files and serves the sum of
  its own and its pool children's on that port (:mod:`awooop.exporter`) — else as one of the
  directory's users, for a web server on the same host to serve (:mod:`awooop.metric_files`).
  A pool child that ends is marked dead (prometheus_client's bookkeeping for ``live`` gauges).
* **Counters.** Every maintenance task run is counted by sweep and outcome
  (``awooop_sweep_passes_total``), every schedule entry beat sends by task
  (``awooop_beat_sent_total``).
* **Logs.** Celery does not configure logging (a ``setup_logging`` receiver exists): the root
  logger writes JSON lines to stderr (:func:`awooop.logs.configure_root`), Python warnings
  included, and the worker's "Warm shutdown" notice on SIGTERM is a JSON line instead of text
  on stdout. Celery's start-up banner is text: run the worker and beat with ``--quiet`` (the
  Procfile does).

Installed by :mod:`awooop.tasks.app` (:func:`install`). Nothing here runs in a web process,
which imports the Celery app only to send messages.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery, bootsteps, signals

from awooop import exporter, logs, metric_files, metrics
from awooop.config import ConfigError, Settings, get_settings, metrics_dir

log = logging.getLogger("awooop.tasks.observability")

SWEEP_PREFIX = "awooop.sweeps."

# True in a process that took the metrics directory, and in the processes it forks: an
# embedded beat (`worker -B`) is its worker's child and must not take it again.
_directory_taken = False


def _take_directory(settings: Settings) -> str | None:
    """Own or use the metrics directory; returns it when this process must serve it."""
    global _directory_taken
    directory = metrics_dir()
    if settings.metrics_port:
        if not directory:
            raise ConfigError(
                f"AWOOOP_METRICS_PORT={settings.metrics_port} needs PROMETHEUS_MULTIPROC_DIR: a "
                "directory of this process's own, where its pool processes write their metrics"
            )
        removed = metric_files.own(directory)
        log.info(
            "metrics directory emptied",
            extra={"action": "metrics_directory_emptied", "directory": directory, "files": removed},
        )
    elif directory:
        metric_files.use(directory)
    _directory_taken = True
    return directory if settings.metrics_port else None


def _serve(settings: Settings, directory: str) -> exporter.Endpoint:
    endpoint = exporter.start(directory, settings.metrics_address, settings.metrics_port)
    log.info(
        "metrics endpoint listening",
        extra={"action": "metrics_endpoint_started", "url": endpoint.url},
    )
    return endpoint


def _refuse(exc: ConfigError) -> SystemExit:
    log.critical(str(exc), extra={"action": "metrics_endpoint_failed"})
    return SystemExit(1)


class MetricsEndpoint(bootsteps.StartStopStep):
    """The worker's metrics: the directory taken before the pool forks, its endpoint served
    once the pool runs, the known series created at 0."""

    label = "metrics"
    requires = {"celery.worker.components:Pool"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.settings = get_settings()
        self.directory: str | None = None
        self.endpoint: exporter.Endpoint | None = None

    def create(self, parent: Any) -> MetricsEndpoint:
        try:
            self.directory = _take_directory(self.settings)
        except ConfigError as exc:
            raise _refuse(exc) from exc
        return self

    def start(self, parent: Any) -> None:
        metrics.zero_known_series(
            name.removeprefix(SWEEP_PREFIX) for name in parent.app.tasks if _is_sweep(name)
        )
        if self.directory is not None:
            try:
                self.endpoint = _serve(self.settings, self.directory)
            except ConfigError as exc:
                raise _refuse(exc) from exc

    def stop(self, parent: Any) -> None:
        if self.endpoint is not None:
            self.endpoint.stop()
            self.endpoint = None

    terminate = stop


def _is_sweep(name: str | None) -> bool:
    return bool(name) and str(name).startswith(SWEEP_PREFIX)


def _count_sweep(task: Any, outcome: str) -> None:
    name = getattr(task, "name", None)
    if _is_sweep(name):
        metrics.SWEEP_PASSES.labels(str(name).removeprefix(SWEEP_PREFIX), outcome).inc()


def _sweep_succeeded(sender: Any = None, **_: Any) -> None:
    _count_sweep(sender, "succeeded")


def _sweep_failed(sender: Any = None, **_: Any) -> None:
    _count_sweep(sender, "failed")


def _sweep_revoked(sender: Any = None, expired: bool = False, **_: Any) -> None:
    if expired:
        _count_sweep(sender, "expired")


def _pool_process_ended(pid: int | None = None, **_: Any) -> None:
    if pid is not None:
        metric_files.mark_dead(pid, metrics_dir())


def _beat_started(sender: Any = None, **_: Any) -> None:
    # An embedded beat (`worker -B`) is its worker's child: the worker took the directory and
    # serves it, sends counted here included.
    if not _directory_taken:
        settings = get_settings()
        try:
            directory = _take_directory(settings)
            if directory is not None:
                _serve(settings, directory)
        except ConfigError as exc:
            raise _refuse(exc) from exc
    signals.after_task_publish.connect(_beat_sent)


def _beat_sent(sender: Any = None, **_: Any) -> None:
    metrics.BEAT_SENT.labels(str(sender)).inc()


# --- logs -------------------------------------------------------------------------------


def _worker_logging_early(options: dict[str, Any] | None = None, **_: Any) -> None:
    # celeryd_init comes before Celery's own start-up warnings (e.g. running as root).
    logs.configure_root((options or {}).get("loglevel") or "INFO")


def _json_logging(loglevel: Any = None, **_: Any) -> None:
    # Any receiver of setup_logging makes Celery leave logging alone.
    logs.configure_root(loglevel or "INFO")


def _quiet_shutdown_notice(sender: Any = None, **_: Any) -> None:
    # Celery prints "worker: Warm shutdown (MainProcess)" to stdout on SIGTERM; the same
    # handler without the print, and a JSON line from worker_shutting_down instead.
    from celery.apps import worker as celery_worker

    controller = getattr(sender, "controller", None)
    if controller is not None:
        celery_worker.install_worker_term_handler(controller, verbose=False)


def _shutting_down(sig: Any = None, how: Any = None, **_: Any) -> None:
    log.info(
        "worker shutting down",
        extra={"action": "worker_shutting_down", "signal": sig, "how": how, "pid": os.getpid()},
    )


def install(app: Celery) -> None:
    """Connect everything above to ``app``'s worker and beat."""
    app.steps["worker"].add(MetricsEndpoint)
    # Connected here, before any tracer is built: Celery's tracers hold the receiver lists.
    signals.task_success.connect(_sweep_succeeded)
    signals.task_failure.connect(_sweep_failed)
    signals.task_revoked.connect(_sweep_revoked)
    signals.worker_process_shutdown.connect(_pool_process_ended)
    signals.celeryd_init.connect(_worker_logging_early)
    signals.setup_logging.connect(_json_logging)
    signals.worker_ready.connect(_quiet_shutdown_notice)
    signals.worker_shutting_down.connect(_shutting_down)
    signals.beat_init.connect(_beat_started)
