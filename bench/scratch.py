"""Scratch databases for the benchmarks: created on the server of ``AWOOOP_DATABASE_URL``,
migrated to head (or left empty, for a peer's own schema), dropped at the end.

``make bench``, ``make bench-peers`` and ``make bench-retention`` each measure in databases of
their own, so that nothing else committing on the configured database (a ``make run``, the
test suite, another bench) is counted, and so that their rows never mix with anyone's.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import psycopg2
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent


def server_url(url: str) -> str:
    """The server's ``postgres`` database, where databases are created and dropped."""
    return make_url(url).set(database="postgres").render_as_string(hide_password=False)


def database_url(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The SQLAlchemy URL as libpq (psycopg2, psycopg 3) spells it."""
    return url.replace("postgresql+psycopg2://", "postgresql://", 1)


def new_name(prefix: str) -> str:
    """``<prefix>_<yyyymmddhhmmss>_<hex>``: unique, and telling when it was made."""
    return f"{prefix}_{time.strftime('%Y%m%d%H%M%S')}_{secrets.token_hex(3)}"


def create_empty(admin: Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))


def create_database(admin: Engine, url: str, name: str) -> str:
    """A new database ``name`` beside ``url``'s, migrated to head (``awooop migrate``'s
    Alembic upgrade); its URL."""
    from alembic import command
    from alembic.config import Config

    create_empty(admin, name)
    db_url = database_url(url, name)
    engine = create_engine(db_url)
    config = Config(str(ROOT / "alembic.ini"))
    # No transaction open: Alembic opens its own (and steps out of it for CREATE INDEX
    # CONCURRENTLY).
    with engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    engine.dispose()
    return db_url


def drop_database(admin: Engine, name: str) -> None:
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _tables(cur: psycopg2.extensions.cursor) -> list[str]:
    cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1")
    return [str(row[0]) for row in cur.fetchall()]


def autovacuum_off(url: str) -> list[str]:
    """Turn autovacuum (and autoanalyze) off on every table of the database's schema, TOAST
    tables included; the tables."""
    conn = psycopg2.connect(libpq_url(url), application_name="awooop-bench-setup")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            tables = _tables(cur)
            for table in tables:
                cur.execute(
                    f'ALTER TABLE "{table}" SET '
                    "(autovacuum_enabled = off, toast.autovacuum_enabled = off)"
                )
        return tables
    finally:
        conn.close()


def vacuum_analyze(url: str, maintenance_url: str | None = None) -> None:
    """``VACUUM (ANALYZE)`` of every table of the database's schema. With
    ``maintenance_url``: returns once its session has ended on the server (a backend flushes
    its statistics — here a commit per table — as it exits, after the client has gone)."""
    conn = psycopg2.connect(libpq_url(url), application_name="awooop-bench-setup")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            (pid,) = cur.fetchone()
            tables = _tables(cur)
            cur.execute("VACUUM (ANALYZE) " + ", ".join(f'"{t}"' for t in tables))
    finally:
        conn.close()
    if maintenance_url is not None:
        _wait_ended(maintenance_url, pid)


def wait_no_sessions(maintenance_url: str, database: str, timeout: float = 15.0) -> None:
    """Until no session is connected to ``database``: every backend that was has exited and
    flushed its statistics (engines the setup dropped close their connections when the
    garbage collector gets to them, at no moment of ours)."""
    _wait_gone(
        maintenance_url,
        "SELECT 1 FROM pg_stat_activity WHERE datname = %s LIMIT 1",
        database,
        f"sessions still connected to {database}",
        timeout,
    )


def _wait_ended(maintenance_url: str, pid: int, timeout: float = 10.0) -> None:
    _wait_gone(
        maintenance_url,
        "SELECT 1 FROM pg_stat_activity WHERE pid = %s",
        pid,
        f"the VACUUM session (pid {pid}) had not ended",
        timeout,
    )


def _wait_gone(maintenance_url: str, query: str, arg: object, what: str, timeout: float) -> None:
    """Until ``query`` (on ``pg_stat_activity``, through the configured database) finds no
    row; TimeoutError naming ``what`` after ``timeout`` seconds."""
    conn = psycopg2.connect(libpq_url(maintenance_url), application_name="awooop-bench")
    try:
        conn.autocommit = True
        deadline = time.monotonic() + timeout
        with conn.cursor() as cur:
            while time.monotonic() < deadline:
                cur.execute(query, (arg,))
                if cur.fetchone() is None:
                    return
                time.sleep(0.05)  # polling the server's view until the sessions are gone
    finally:
        conn.close()
    raise TimeoutError(f"{what} after {timeout:.0f} s")
