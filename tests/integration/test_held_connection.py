"""A run segment's statements share one connection (``db.HeldConnection``); one the server
ended between two of them, or that failed a statement, is replaced, not used again."""

from __future__ import annotations

import pytest
from sqlalchemy import exc, text

from awooop import db as awooop_db
from tests.support import db


def _pid(conn) -> int:
    return conn.execute(text("SELECT pg_backend_pid()")).scalar_one()


def test_the_statements_share_one_connection_until_the_server_ends_it(engine):
    held = awooop_db.HeldConnection(engine)
    try:
        with held.connect() as conn:
            first = _pid(conn)
        with held.connect() as conn:
            assert _pid(conn) == first  # the same session

        db.terminate_backend(engine, first)  # e.g. an idle timeout while a step ran

        with held.connect() as conn:
            assert _pid(conn) != first  # a fresh one, and no statement failed
    finally:
        held.close()


def test_a_statement_that_fails_gives_the_connection_back(engine):
    held = awooop_db.HeldConnection(engine)
    before = engine.pool.checkedout()
    try:
        with held.connect() as conn:
            conn.execute(text("SELECT 1"))
        assert engine.pool.checkedout() == before + 1  # kept between statements
        with pytest.raises(exc.DBAPIError), held.connect() as conn:
            conn.execute(text("SELECT 1 / 0"))
        assert engine.pool.checkedout() == before  # given back: a retry starts afresh
        with held.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        held.close()
    assert engine.pool.checkedout() == before
