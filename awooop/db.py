"""The process's SQLAlchemy engine.

**Every statement commits by itself.** The engine runs in autocommit mode: the hot paths
(admission, claim, step records, sweeps) are single statements — data-modifying CTEs — so
each is atomic on its own, and psycopg2 no longer spends a round trip on ``BEGIN`` and
another on ``COMMIT``. Work that needs several statements in one transaction must use
:func:`transaction`; ``engine.begin()`` on this engine does *not* group statements.

There is no ``pool_pre_ping``: a ping is a round trip per checkout. A connection the server
dropped fails its statement instead, the pool discards it (``is_disconnect``), and the
caller's retry or the client's retry (503) recovers.
"""

from __future__ import annotations

import functools
import math
from contextlib import AbstractContextManager

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.pool import NullPool

from awooop.config import get_settings


def make_engine(database_url: str, pool_size: int = 5) -> Engine:
    return create_engine(
        database_url,
        isolation_level="AUTOCOMMIT",
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_recycle=1800,
        # Answer quickly with 503 instead of hanging when the database is down.
        connect_args={"connect_timeout": 5, "application_name": "awooop"},
    )


def make_probe_engine(database_url: str, timeout_seconds: float) -> Engine:
    """An engine for health checks: a fresh connection per check, failing within about
    ``timeout_seconds`` (libpq's connect timeout is whole seconds, at least 2)."""
    return create_engine(
        database_url,
        isolation_level="AUTOCOMMIT",
        poolclass=NullPool,
        connect_args={
            "connect_timeout": max(2, math.ceil(timeout_seconds)),
            "application_name": "awooop-readyz",
            "options": f"-c statement_timeout={max(1, int(timeout_seconds * 1000))}",
        },
    )


def transaction(engine: Engine) -> AbstractContextManager[Connection]:
    """``with db.transaction(engine) as conn:`` — several statements, one transaction."""
    return engine.execution_options(isolation_level="READ COMMITTED").begin()


@functools.cache
def get_engine() -> Engine:
    settings = get_settings()
    return make_engine(settings.database_url, settings.db_pool_size)


def dispose_after_fork() -> None:
    """Drop pooled connections inherited from a parent process without closing them."""
    if get_engine.cache_info().currsize:
        get_engine().dispose(close=False)
