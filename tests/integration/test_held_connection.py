"""A run segment's statements share one connection (``db.HeldConnection``), and a web request
thread keeps one for its admissions (``db.thread_connection``); one the server ended between
two of them, or that failed a statement, is replaced, not used again."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from sqlalchemy import exc, text

from awooop import db as awooop_db
from awooop.web.app import create_app
from tests.support import db, requests
from tests.support.waiting import until


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


def test_a_thread_keeps_its_own_connection_until_it_ends(engine):
    try:
        with awooop_db.thread_connection(engine).connect() as conn:
            mine = _pid(conn)
        assert engine.pool.checkedout() == 1  # kept between calls
        with awooop_db.thread_connection(engine).connect() as conn:
            assert _pid(conn) == mine
        theirs: list[tuple[int, int]] = []

        def other_thread() -> None:
            with awooop_db.thread_connection(engine).connect() as conn:
                theirs.append((_pid(conn), engine.pool.checkedout()))

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()

        assert theirs[0][0] != mine and theirs[0][1] == 2  # one connection each
        until(lambda: engine.pool.checkedout() == 1, 5, "the ended thread's connection back")
    finally:
        awooop_db.release_thread_connection()
    assert engine.pool.checkedout() == 0


def test_a_thread_that_turns_to_another_engine_gives_the_first_ones_connection_back(
    engine, database_url
):
    other = awooop_db.make_engine(database_url, pool_size=1)
    try:
        with awooop_db.thread_connection(engine).connect() as conn:
            conn.execute(text("SELECT 1"))
        with awooop_db.thread_connection(other).connect() as conn:
            conn.execute(text("SELECT 1"))

        assert (engine.pool.checkedout(), other.pool.checkedout()) == (0, 1)
    finally:
        awooop_db.release_thread_connection()
        other.dispose()


def test_an_admission_after_the_server_ended_the_threads_connection_is_admitted(
    client, engine, project
):
    def admit(update_id: int) -> int:
        path, headers, body = requests.telegram(project, update_id=update_id)
        return client.post(path, headers=headers, data=body).status_code

    def kept_pid() -> int:
        with awooop_db.thread_connection(engine).connect() as conn:
            return _pid(conn)

    assert admit(1) == 202
    assert engine.pool.checkedout() == 1  # kept by this thread after the request
    first = kept_pid()  # the connection the admission ran on, kept by this thread
    db.terminate_backend(engine, first)  # a restart, an idle timeout

    assert admit(2) == 202  # on a fresh connection: no 503, no failed statement
    assert kept_pid() != first
    assert db.count(engine, "awooop_run_state") == 2
    assert engine.pool.checkedout() == 1


def test_admissions_take_no_connection_from_the_pool_besides_the_threads_own(
    settings, engine, project
):
    # Every request reads the project's credentials (no cache) and admits: both statements
    # run on the connection this thread keeps.
    client = create_app(dataclasses.replace(settings, auth_cache_seconds=0), engine).test_client()
    for update_id in (1, 2, 3):
        path, headers, body = requests.telegram(project, update_id=update_id)
        assert client.post(path, headers=headers, data=body).status_code == 202

    assert (engine.pool.checkedout(), engine.pool.checkedin()) == (1, 0)
