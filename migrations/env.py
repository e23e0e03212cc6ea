"""Alembic environment: targets awooop.models.metadata.

The URL is, in order: a connection handed in by the caller (``config.attributes
["connection"]``, used by tests), a URL handed in by the caller (``config.attributes["url"]``,
used by ``awooop migrate``), ``-x url=...``, or ``AWOOOP_DATABASE_URL``.

Each migration runs in a transaction of its own (``transaction_per_migration``), which records
its revision as it commits: an index a migration builds ``CONCURRENTLY`` is built outside any
transaction (``op.get_context().autocommit_block()``), which commits what the migration did
before it, and a migration that fails leaves the ones before it applied. A connection handed
in must not be inside a transaction (``engine.connect()``, not ``engine.begin()``): Alembic
cannot step out of a transaction it did not begin.
"""

from alembic import context
from sqlalchemy import create_engine, pool

from awooop.models import metadata

config = context.config


def _url() -> str:
    if config.attributes.get("url"):
        return str(config.attributes["url"])
    url = context.get_x_argument(as_dictionary=True).get("url")
    if url:
        return url
    from awooop.config import database_url

    return database_url()


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=metadata,
        literal_binds=True,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    if connection.in_transaction():
        raise RuntimeError(
            "migrations need a connection outside a transaction (engine.connect(), not "
            "engine.begin()): the concurrent index builds run outside one"
        )
    context.configure(
        connection=connection,
        target_metadata=metadata,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
