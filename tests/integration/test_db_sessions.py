"""Database sessions: every connection carries its role's statement and lock
timeouts and TCP keepalives, and a connection the server closed costs no failed statement."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from sqlalchemy import text

from awooop import db
from awooop.config import Settings
from awooop.web.app import create_app
from tests.support import db as support_db


def _show(conn, name: str) -> str:
    return str(conn.execute(text(f"SHOW {name}")).scalar_one())


@pytest.mark.parametrize("role", db.ROLES)
def test_each_role_gets_its_timeouts_and_keepalives_from_settings(database_url, role):
    settings = Settings(
        **{
            f"db_statement_timeout_{role}_seconds": 7.5,
            f"db_lock_timeout_{role}_seconds": 1.25,
            "db_keepalives_idle_seconds": 11,
        }
    )
    engine = db.make_engine(database_url, pool_size=1, role=role, settings=settings)
    try:
        with engine.connect() as conn:
            seen = {
                "statement_timeout": _show(conn, "statement_timeout"),
                "lock_timeout": _show(conn, "lock_timeout"),
                "application_name": _show(conn, "application_name"),
            }
            keepalive_idle = conn.connection.dbapi_connection.get_dsn_parameters()
    finally:
        engine.dispose()

    assert seen == {
        "statement_timeout": "7500ms",
        "lock_timeout": "1250ms",
        "application_name": f"awooop-{role}",
    }
    assert keepalive_idle["keepalives_idle"] == "11"
    assert keepalive_idle["keepalives"] == "1"
    assert keepalive_idle["tcp_user_timeout"] == "30000"


def test_the_keeper_renews_on_its_own_pool_with_the_keeper_limits(engine):
    keeper = db.keeper_engine(engine)

    assert keeper is db.keeper_engine(engine) and keeper is not engine
    with keeper.connect() as conn:
        assert _show(conn, "application_name") == "awooop-keeper"
        assert _show(conn, "statement_timeout") == "5s"


def test_a_pooled_connection_whose_backend_was_terminated_is_replaced_before_use(database_url):
    # Given a pooled connection whose server session ended while it sat in the pool
    engine = db.make_engine(database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        support_db.terminate_backend(engine, pid)

        # When the next statement runs, then it succeeds, on a new session
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_backend_pid()")).scalar_one() != pid
    finally:
        engine.dispose()


def test_a_statement_failing_on_a_connection_the_server_closed_is_retried_once(database_url):
    # Given a statement whose connection's session ends while it is checked out
    engine = db.make_engine(database_url, pool_size=1)
    tries: list[int] = []

    def statement(conn):
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        tries.append(pid)
        if len(tries) == 1:
            support_db.terminate_backend(engine, pid)
        return conn.execute(text("SELECT pg_backend_pid()")).scalar_one()

    try:
        # When it runs through retry_on_disconnect, then the second try succeeds elsewhere
        assert db.retry_on_disconnect(engine, statement) == tries[1]
    finally:
        engine.dispose()
    assert len(tries) == 2 and tries[0] != tries[1]


def test_a_web_process_keeps_a_connection_per_request_thread(settings):
    """Every request thread of a web process busy at once, three times over: the threads
    reuse the connections of the first round. (With fewer pooled connections than threads,
    each round opened new server processes for the threads beyond the pool and closed them
    again when they returned.)"""
    threads = settings.db_pool_size + 3
    app = create_app(dataclasses.replace(settings, web_threads=threads))
    engine = app.extensions["awooop"]["engine"]
    all_busy = threading.Barrier(threads)
    backends: list[set[int]] = []

    def serve(seen: set[int]) -> None:
        with engine.connect() as conn:
            seen.add(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            all_busy.wait(timeout=10)  # every thread holds its connection at once

    try:
        for _ in range(3):
            seen: set[int] = set()
            workers = [threading.Thread(target=serve, args=(seen,)) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            backends.append(seen)
    finally:
        engine.dispose()

    assert [len(seen) for seen in backends] == [threads] * 3
    assert backends[1] == backends[0] and backends[2] == backends[0]
