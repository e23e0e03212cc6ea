"""``awooop migrate``: Alembic's upgrade (or downgrade) of the deployment's database, safe to
run while the previous release serves (docs/upgrading.md).

- **One at a time.** It holds a session-level advisory lock (:data:`MIGRATION_LOCK_KEY
  <awooop.store.schema.MIGRATION_LOCK_KEY>`) while it migrates. A second ``awooop migrate``
  says it is waiting, waits up to ``AWOOOP_MIGRATE_WAIT_SECONDS`` for the first to finish
  (then finds nothing left to do), and past that gives up with exit status 1, naming the
  session that holds the lock. It asks for the lock twice a second rather than wait inside
  one statement (see :func:`_wait_migration_lock`).
- **Never queues the deployment behind it.** Every migration transaction runs with
  ``lock_timeout = AWOOOP_MIGRATE_LOCK_TIMEOUT_SECONDS``: a statement that needs a table lock
  a long transaction holds (an ``ALTER TABLE`` waiting for ACCESS EXCLUSIVE makes every
  admission wait behind it) is cancelled after that long, its migration rolled back, and
  tried again up to ``AWOOOP_MIGRATE_LOCK_RETRIES`` times, a lock timeout apart; the
  migrations before it stay applied (one transaction per migration). Index builds on
  existing tables run ``CONCURRENTLY`` outside any transaction, block no writer, and so wait
  as long as they need.
- **No half-built index left behind.** A concurrent build that failed or was interrupted
  leaves an INVALID index, which ``IF NOT EXISTS`` would take for built: an upgrade drops
  AwoooP's invalid indexes (concurrently) before it starts, and the migration that failed
  builds them again.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, create_engine, event, pool

from awooop.config import Settings
from awooop.store import schema

_PACKAGED_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# The migrations ship inside the package (a wheel), or sit beside it (a checkout).
MIGRATIONS = (
    _PACKAGED_MIGRATIONS
    if _PACKAGED_MIGRATIONS.is_dir()
    else Path(__file__).resolve().parent.parent / "migrations"
)


# How often a waiting `awooop migrate` asks for the migration lock again.
_LOCK_POLL_SECONDS = 0.5


class MigrateError(RuntimeError):
    """The migration could not run; the message says why and what to do."""


class RevisionError(MigrateError):
    """The revision asked for is not one this release can migrate to from the database's
    (no migration has it, or a downgrade to a revision above the schema): bad input."""


def _say(message: str) -> None:
    print(f"awooop migrate: {message}", file=sys.stderr, flush=True)


def run(
    settings: Settings,
    revision: str = "head",
    down: bool = False,
    say: Callable[[str], None] = _say,
) -> None:
    """Upgrade (or downgrade) the database of ``settings`` to ``revision`` under the
    migration lock; raises :class:`MigrateError`."""
    engine = create_engine(settings.database_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn, _migration_lock(conn, settings, say):
            if not down:
                _drop_invalid_indexes(conn, say)
            _migrate_with_retries(conn, settings, revision, down, say)
    finally:
        engine.dispose()


@contextmanager
def _migration_lock(
    conn: Connection, settings: Settings, say: Callable[[str], None]
) -> Iterator[None]:
    taken = schema.try_migration_lock(conn)
    conn.commit()
    if not taken:
        wait = settings.migrate_wait_seconds
        say(
            f"another awooop migrate holds the migration lock ({_holders(conn)}); "
            f"waiting up to {wait:g} s (AWOOOP_MIGRATE_WAIT_SECONDS) for it to finish"
        )
        if not _wait_migration_lock(conn, wait):
            raise MigrateError(
                f"another awooop migrate still holds the migration lock after {wait:g} s "
                f"({_holders(conn)}): let it finish, or end that session, and run awooop "
                "migrate again"
            )
        say("the migration lock is free: migrating")
    try:
        yield
    finally:
        if conn.in_transaction():
            conn.rollback()
        schema.release_migration_lock(conn)
        conn.commit()


def _wait_migration_lock(conn: Connection, seconds: float) -> bool:
    """Ask for the migration lock every half second for at most ``seconds``.

    Asked, not waited for in one statement: a session blocked in ``pg_advisory_lock`` holds
    a snapshot, and the other migrate's concurrent index build waits for every older
    snapshot to end, so each would wait for the other (the server ends that as a deadlock).
    """
    deadline = time.monotonic() + seconds
    while True:
        taken = schema.try_migration_lock(conn)
        conn.commit()
        if taken:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(_LOCK_POLL_SECONDS, max(0.0, deadline - time.monotonic())))


def _holders(conn: Connection) -> str:
    holders = schema.migration_lock_holders(conn)
    conn.commit()
    if not holders:
        return "a session that has just released it"
    return ", ".join(
        f"pid {h['pid']} from {h['client_addr'] or 'a local socket'} "
        f"since {h['backend_start']:%Y-%m-%d %H:%M:%S %Z}"
        for h in holders
    )


def _drop_invalid_indexes(conn: Connection, say: Callable[[str], None]) -> None:
    names = schema.invalid_indexes(conn)
    conn.commit()
    if not names:
        return
    autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
    for name in names:
        say(f"dropping index {name}: an earlier concurrent build left it invalid; rebuilt below")
        schema.drop_index_concurrently(autocommit, name)
        autocommit.commit()  # ends SQLAlchemy's own transaction; the server's had none
    conn.execution_options(isolation_level=conn.default_isolation_level or "READ COMMITTED")


def _migrate_with_retries(
    conn: Connection, settings: Settings, revision: str, down: bool, say: Callable[[str], None]
) -> None:
    timeout = settings.migrate_lock_timeout_seconds
    retries = settings.migrate_lock_retries

    def set_lock_timeout(connection: Connection) -> None:
        schema.set_local_lock_timeout(connection.connection.dbapi_connection, timeout)

    event.listen(conn, "begin", set_lock_timeout)
    try:
        for attempt in range(retries + 1):
            try:
                _alembic(conn, revision, down)
                return
            except Exception as exc:
                if conn.in_transaction():
                    conn.rollback()
                if _is_revision_error(exc):
                    raise RevisionError(_revision_problem(conn, revision, down, exc)) from exc
                if not schema.is_lock_timeout(exc):
                    raise
                if attempt == retries:
                    raise MigrateError(
                        f"a migration waited more than {timeout:g} s for a table lock "
                        f"{retries + 1} times (AWOOOP_MIGRATE_LOCK_TIMEOUT_SECONDS, "
                        "AWOOOP_MIGRATE_LOCK_RETRIES): a long transaction holds it (see "
                        "pg_stat_activity); the migrations before it are applied. Run awooop "
                        "migrate again once it ends"
                    ) from exc
                say(
                    f"a migration waited more than {timeout:g} s for a table lock and was "
                    f"rolled back; trying again in {timeout:g} s "
                    f"({attempt + 1} of {retries} retries)"
                )
                time.sleep(timeout)
    finally:
        event.remove(conn, "begin", set_lock_timeout)


def _is_revision_error(exc: BaseException) -> bool:
    from alembic.util.exc import CommandError

    return isinstance(exc, CommandError)


def _revision_problem(conn: Connection, revision: str, down: bool, exc: BaseException) -> str:
    """One line: what alembic refused, where the database is and what this release has."""
    from alembic.script import ScriptDirectory

    found = schema.revisions(conn)
    conn.rollback()
    at = f"revision {', '.join(sorted(found))}" if found else "no revision (no AwoooP tables)"
    revisions = [r.revision for r in ScriptDirectory(str(MIGRATIONS)).walk_revisions()]
    reason = " ".join(str(exc).split())
    return (
        f"cannot migrate {'down' if down else 'up'} to {revision!r}: {reason}. The database is "
        f"at {at}; this release's migrations are {revisions[-1]} to {revisions[0]} "
        "(`head` is the newest; `base`, with --down, drops every AwoooP table)"
    )


def _alembic(conn: Connection, revision: str, down: bool) -> None:
    from alembic import command
    from alembic.config import Config

    # The migrations ship inside the package, so an installed wheel migrates without the
    # repository's alembic.ini (which points at the same directory).
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = conn
    if down:
        command.downgrade(config, revision)
    else:
        command.upgrade(config, revision)


# --- The schema a starting process needs ---------------------------------------------------


def head_revision() -> str:
    """The newest migration this release ships: the schema its processes need."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    assert head is not None
    return head


def schema_problem(conn: Connection) -> str | None:
    """Why this release's processes cannot use the database's schema, or None.

    They need every migration the release ships (:func:`head_revision`). A revision this
    release does not know is a later release's: its migrations only add (docs/upgrading.md),
    so this release's processes keep working on it.
    """
    from alembic.script import ScriptDirectory

    found = schema.revisions(conn)
    script = ScriptDirectory(str(MIGRATIONS))
    head = script.get_current_head()
    if not found:
        return (
            "the database has no AwoooP schema (no migration applied): run `awooop migrate` "
            "before starting the processes"
        )
    known = {r.revision for r in script.walk_revisions()}
    if head in found or not found <= known:
        return None
    return (
        f"the database schema is at revision {', '.join(sorted(found))} and this release "
        f"needs {head}: run this release's `awooop migrate` before starting its processes "
        "(docs/upgrading.md)"
    )


def check_schema_or_exit(settings: Settings, process: str) -> None:
    """A starting process (web, worker, beat) refuses to run on a schema older than its
    release needs: one line on stderr, exit status 2. A database it cannot reach is not
    checked (the process starts and copes with the outage as it does later on)."""
    import logging

    from sqlalchemy import exc as sa_exc

    log = logging.getLogger("awooop.migrate")
    engine = create_engine(
        settings.database_url, poolclass=pool.NullPool, connect_args={"connect_timeout": 5}
    )
    try:
        with engine.connect() as conn:
            problem = schema_problem(conn)
    except sa_exc.DBAPIError as exc:
        log.warning(
            "could not check the database schema",
            extra={"action": "schema_check_failed", "role": process, "error": str(exc.orig)},
        )
        return
    finally:
        engine.dispose()
    if problem is not None:
        print(f"awooop: {process}: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    log.info("schema checked", extra={"action": "schema_checked", "role": process})
