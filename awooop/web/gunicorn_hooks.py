"""gunicorn's server hooks for the metrics directory (imported by
:mod:`awooop.web.gunicorn_conf`):

* ``on_starting``: the web processes are users of ``PROMETHEUS_MULTIPROC_DIR``, so a worker or
  beat that serves its own metrics cannot take the directory from under them
  (:mod:`awooop.metric_files`).
* ``post_worker_init``: a web process that loaded the application leaves what it loaded out
  of the garbage collector's full collections (:func:`awooop.bootstrap.freeze_startup_objects`).
* ``child_exit``: prometheus_client's multiprocess bookkeeping for a web process that ended.
"""

from __future__ import annotations

from typing import Any

from awooop import bootstrap, metric_files
from awooop.config import metrics_dir

__all__ = ["child_exit", "on_starting", "post_worker_init"]


def on_starting(server: Any) -> None:
    directory = metrics_dir()
    if directory:
        metric_files.use(directory)


def post_worker_init(worker: Any) -> None:
    bootstrap.freeze_startup_objects()


def child_exit(server: Any, worker: Any) -> None:
    metric_files.mark_dead(worker.pid, metrics_dir())
