"""A primary and a streaming standby of this test run: a :class:`~tests.chaos.services.Postgres`
cluster, and :class:`Standby`, a ``pg_basebackup -R`` copy of it started on another port.

The binaries are the system's PostgreSQL when installed, else the ``pgserver`` wheel's (which
ships ``pg_basebackup``); :func:`missing_binaries` says when neither has what these need.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, create_engine, text

from tests.chaos.services import Postgres, pg_bin
from tests.support import waiting

NEEDED = ("initdb", "pg_ctl", "postgres", "pg_basebackup")


def missing_binaries() -> str | None:
    """Why a primary and a standby cannot be started here, or None."""
    try:
        absent = [name for name in NEEDED if not pg_bin(name).exists()]
    except Exception as exc:  # neither system binaries nor the pgserver wheel
        return f"no PostgreSQL binaries: {exc}"
    if absent:
        return f"PostgreSQL binaries missing: {', '.join(absent)}"
    return None


class Standby(Postgres):
    """A hot standby streaming from ``primary``, as ``application_name`` (its
    ``pg_stat_replication`` name), made by ``pg_basebackup -R`` instead of ``initdb``."""

    def __init__(self, root: Path, primary: Postgres, application_name: str = "standby1") -> None:
        self.primary = primary
        self.application_name = application_name
        super().__init__(root)

    def _initdb(self, root: Path) -> None:
        # The data directory must not exist yet for pg_basebackup; its parent must be
        # writable by the server's user.
        if self._run_as is not None:
            import pwd

            from awooop import devstack

            devstack._pgserver_utils().ensure_prefix_permissions(root)
            entry = pwd.getpwnam(self._run_as)
            os.chown(root, entry.pw_uid, entry.pw_gid)
            self.log_path.touch()
            os.chown(self.log_path, entry.pw_uid, entry.pw_gid)
        self._pg(
            "pg_basebackup",
            "-D",
            str(self.data),
            "-R",
            "-X",
            "stream",
            "--checkpoint=fast",
            "-d",
            f"host={self.primary.host} port={self.primary.port} user=postgres "
            f"application_name={self.application_name}",
        )
        self.data.chmod(0o700)

    def destroy(self) -> None:
        self.stop("fast")
        shutil.rmtree(self.data, ignore_errors=True)


@contextlib.contextmanager
def primary_with_database(root: Path, database: str) -> Iterator[Postgres]:
    """A started cluster with ``database`` created and migrated; stopped on the way out."""
    from awooop import migrate
    from awooop.config import Settings

    server = Postgres(root)
    server.start()
    try:
        engine = admin(server)
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{database}"'))
        engine.dispose()
        migrate.run(Settings(database_url=server.url(database)), say=lambda _: None)
        yield server
    finally:
        server.stop("immediate")


@contextlib.contextmanager
def streaming_standby(root: Path, primary: Postgres, name: str = "standby1") -> Iterator[Standby]:
    """A hot standby of ``primary`` attached as ``name`` (asynchronous until
    :func:`set_synchronous_standbys` names it); on the way out the primary's
    ``synchronous_standby_names`` is emptied and the standby stopped and gone."""
    root.mkdir(parents=True, exist_ok=True)
    primary_admin = admin(primary)
    server = Standby(root, primary, application_name=name)
    server.start()
    try:
        wait_sync_state(primary_admin, name, "async")
        yield server
    finally:
        set_synchronous_standbys(primary_admin, "")
        server.destroy()
        wait_sync_state(primary_admin, name, None)
        primary_admin.dispose()


def admin(server: Postgres, database: str = "postgres") -> Engine:
    return create_engine(server.url(database), isolation_level="AUTOCOMMIT", pool_size=1)


def sync_states(primary: Engine) -> dict[str, str]:
    """The standbys streaming from ``primary``: application_name → sync_state."""
    with primary.connect() as conn:
        rows = conn.execute(
            text("SELECT application_name, sync_state FROM pg_stat_replication")
        ).all()
    return {row.application_name: row.sync_state for row in rows}


def wait_sync_state(primary: Engine, name: str, state: str | None, timeout: float = 60) -> None:
    """Wait until the standby ``name`` streams from ``primary`` with ``state`` (None: until
    it no longer streams)."""
    waiting.until(
        lambda: sync_states(primary).get(name) == state,
        timeout,
        f"standby {name} to be {state or 'gone'} (now {sync_states(primary)})",
    )


def set_synchronous_standbys(primary: Engine, names: str) -> None:
    """``ALTER SYSTEM SET synchronous_standby_names`` and reload."""
    with primary.connect() as conn:
        conn.execute(text(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'"))
        conn.execute(text("SELECT pg_reload_conf()"))


class Lines(logging.Handler):
    """The records a logger emits while :func:`recorded` holds it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def actions(self, level: int = logging.DEBUG) -> list[str]:
        return [getattr(r, "action", "") for r in self.records if r.levelno >= level]

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


@contextlib.contextmanager
def recorded(name: str) -> Iterator[Lines]:
    """The records of the logger ``name`` (whether or not it propagates) while inside."""
    logger = logging.getLogger(name)
    lines = Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
