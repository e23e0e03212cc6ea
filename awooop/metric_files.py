"""prometheus_client's multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``): who uses it,
who may empty it, and the bookkeeping when a process ends.

Every process writes its metrics to ``<type>_<pid>.db`` files in that directory, and whoever
serves the directory sums every file in it. So a directory has either users or one owner:

* **users** — a gunicorn master and its workers, a Celery worker or beat without an endpoint
  of its own — share it, on one host: the web's ``/metrics`` sums them all. Each holds a shared
  lock on :data:`LOCK_FILE` for as long as it (or a process forked from it) lives.
* an **owner** — a worker or beat that serves the directory on its own endpoint
  (``AWOOOP_METRICS_PORT``) — holds the lock exclusively: it sums every file, so nothing else
  may write there, and it deletes the files of earlier processes when it starts (their
  counters are history; Prometheus reads the restart as a counter reset).
* ``awooop metrics reset`` takes the lock exclusively for a moment: it refuses while any
  process uses the directory.

The lock is a ``flock`` on an open file, so the kernel drops it when the last process holding
that file (the one that took it, and its forked children) ends, however it ends.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from prometheus_client import multiprocess

from awooop.config import ConfigError

LOCK_FILE = "awooop.lock"

# Descriptors of the lock files this process holds: open for its life, never closed.
_held: list[int] = []


class DirectoryInUse(ConfigError):
    """The metrics directory is used by another process in a way this one cannot share."""


def _lock(directory: str | Path, mode: int) -> int | None:
    """A descriptor of the directory's lock file, locked in ``mode``; None if it is taken."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def use(directory: str | Path) -> None:
    """Register this process as one of the directory's users (a shared lock)."""
    fd = _lock(directory, fcntl.LOCK_SH)
    if fd is None:
        raise DirectoryInUse(
            f"PROMETHEUS_MULTIPROC_DIR={directory} belongs to a worker or beat that serves its "
            "own metrics (AWOOOP_METRICS_PORT): give this process another directory"
        )
    _held.append(fd)


def own(directory: str | Path) -> int:
    """Take the directory for this process alone and delete every other process's metric
    files; returns how many were deleted. This process's own files (written since it started)
    are kept."""
    fd = _lock(directory, fcntl.LOCK_EX)
    if fd is None:
        raise DirectoryInUse(
            f"PROMETHEUS_MULTIPROC_DIR={directory} is used by another running process (a web "
            "server, worker or beat): a worker or beat that serves its own metrics "
            "(AWOOOP_METRICS_PORT) needs a directory of its own"
        )
    _held.append(fd)
    return _delete(Path(directory), keep_pid=os.getpid())


def reset(directory: str | Path) -> int:
    """Delete the metric files in ``directory`` (before the processes start); returns how many.

    Only prometheus_client's ``*.db`` files are removed, so a mistaken path loses nothing else.
    Refused while any process uses the directory: its counters would silently restart.
    """
    fd = _lock(directory, fcntl.LOCK_EX)
    if fd is None:
        raise DirectoryInUse(
            f"PROMETHEUS_MULTIPROC_DIR={directory} is in use by running processes; stop them "
            "before emptying it"
        )
    try:
        return _delete(Path(directory), keep_pid=None)
    finally:
        os.close(fd)


def _delete(path: Path, keep_pid: int | None) -> int:
    removed = 0
    for file in path.glob("*.db"):
        if keep_pid is not None and file.stem.rpartition("_")[2] == str(keep_pid):
            continue
        file.unlink(missing_ok=True)
        removed += 1
    return removed


def mark_dead(pid: int, directory: str | None) -> None:
    """A process of this directory ended: drop its ``live*`` gauge files (prometheus_client's
    bookkeeping; its counters and histograms stay, or the sums would go down)."""
    if directory:
        multiprocess.mark_process_dead(pid, directory)
