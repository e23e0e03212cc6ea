"""What gunicorn's settings module takes from AwoooP for its logs and metrics:
``from awooop.web.gunicorn_hooks import *`` there.

* ``logconfig_dict``: gunicorn's own lines as JSON — its error log on stderr, its access log
  (one line per request, fields from :class:`awooop.web.access_log.RedactingLogger`) on
  stdout, nowhere when ``AWOOOP_ACCESS_LOG=0``.
* ``on_starting``: the web processes are users of ``PROMETHEUS_MULTIPROC_DIR``, so a worker or
  beat that serves its own metrics cannot take the directory from under them
  (:mod:`awooop.metric_files`).
* ``child_exit``: prometheus_client's multiprocess bookkeeping for a web process that ended.
"""

from __future__ import annotations

from typing import Any

from awooop import logs, metric_files
from awooop.config import Settings, metrics_dir

__all__ = ["access_log_format", "child_exit", "logconfig_dict", "on_starting"]

logconfig_dict = logs.gunicorn_logconfig(access_log=bool(Settings.from_env(required=()).access_log))
# The line's message; its fields carry method, path, status, size and time apart.
access_log_format = "%(m)s %(U)s %(s)s %(M)sms"


def on_starting(server: Any) -> None:
    directory = metrics_dir()
    if directory:
        metric_files.use(directory)


def child_exit(server: Any, worker: Any) -> None:
    metric_files.mark_dead(worker.pid, metrics_dir())
