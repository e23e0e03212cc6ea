"""The schema's own statements: the revision Alembic recorded, the migration lock, and the
lock timeout of a migration's transactions (used by :mod:`awooop.migrate`: ``awooop migrate``
and the schema check of a starting process).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

# The key of the session-level advisory lock `awooop migrate` holds while it migrates: the
# ASCII bytes of "awooop" read as one number (0x61776f6f6f70). pg_locks shows it as an
# advisory lock with classid 0x6177 (24951) and objid 0x6f6f6f70 (1869574000).
MIGRATION_LOCK_KEY = 0x61776F6F6F70
MIGRATION_LOCK_CLASSID = MIGRATION_LOCK_KEY >> 32
MIGRATION_LOCK_OBJID = MIGRATION_LOCK_KEY & 0xFFFFFFFF

LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE lock_not_available (lock_timeout)


def revisions(conn: Connection) -> set[str] | None:
    """The revisions ``alembic_version`` records (one, on this linear history), or None when
    the database has no ``alembic_version`` table (never migrated)."""
    exists = conn.execute(text("SELECT to_regclass('alembic_version') IS NOT NULL")).scalar_one()
    if not exists:
        return None
    return set(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())


def try_migration_lock(conn: Connection) -> bool:
    """Take the migration lock for this session if no other session holds it."""
    return bool(
        conn.execute(
            text("SELECT pg_try_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
        ).scalar_one()
    )


def release_migration_lock(conn: Connection) -> None:
    conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})


def migration_lock_holders(conn: Connection) -> list[dict[str, Any]]:
    """The sessions holding the migration lock: pid, client address, since when."""
    rows = conn.execute(
        text(
            """
SELECT a.pid, host(a.client_addr) AS client_addr, a.backend_start, a.application_name
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = :classid AND l.objid = :objid AND l.objsubid = 1
"""
        ),
        {"classid": MIGRATION_LOCK_CLASSID, "objid": MIGRATION_LOCK_OBJID},
    )
    return [dict(row._mapping) for row in rows]


def set_local_lock_timeout(dbapi_connection: Any, seconds: float) -> None:
    """``SET LOCAL lock_timeout`` on a DBAPI connection that is starting a transaction (a
    psycopg2 connection begins one with its first statement). Outside a transaction
    (autocommit: a concurrent index build) it sets nothing, so such a build waits as long as
    it needs: it blocks no writer meanwhile."""
    if getattr(dbapi_connection, "autocommit", False):
        return
    with dbapi_connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = {max(1, round(seconds * 1000))}")


def is_lock_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is the server cancelling a lock wait (``lock_timeout``)."""
    return getattr(getattr(exc, "orig", None), "pgcode", None) == LOCK_NOT_AVAILABLE


def invalid_indexes(conn: Connection) -> list[str]:
    """AwoooP's indexes a concurrent build left INVALID (it failed or was cancelled): the
    queries do not use them, but writers keep them up to date, and ``IF NOT EXISTS`` would
    take them for built."""
    return list(
        conn.execute(
            text(
                """
SELECT c.relname
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE NOT i.indisvalid AND t.relname LIKE 'awooop\\_%' AND n.nspname = current_schema()
ORDER BY c.relname
"""
            )
        ).scalars()
    )


def drop_index_concurrently(conn: Connection, name: str) -> None:
    """Drop index ``name`` without blocking writers (``conn`` must be in autocommit)."""
    quoted = conn.dialect.identifier_preparer.quote(name)
    conn.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {quoted}"))
