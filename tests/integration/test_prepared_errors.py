"""The hot statements run on the DBAPI cursor (``awooop.store.prepared``), not through
SQLAlchemy's execution path; a failure must still read as SQLAlchemy reports it, because the
claim's retry and the fenced writes decide on ``DBAPIError.connection_invalidated`` and the
SQLSTATE. Real faults: a backend terminated while its connection is checked out, and a
statement the server refuses. Rows, too, read as SQLAlchemy's do: by their columns' names.
"""

from __future__ import annotations

import pytest
from sqlalchemy import exc, text

from awooop import db
from awooop.store import leases, segments
from awooop.store.prepared import PreparedStatement
from tests.support import db as support_db
from tests.support import runs as test_runs


def test_a_lost_connection_is_reported_invalidated_and_the_claim_retries_on_a_new_one(
    database_url, project
):
    engine = db.make_engine(database_url, pool_size=2)
    try:
        run_id = test_runs.admit(engine, project["project_id"], "noop-3")
        with engine.connect() as conn:
            # nothing listens to statement events here: the DBAPI path is the one taken
            assert not conn.dispatch.before_cursor_execute
            assert not conn.dispatch.after_cursor_execute
            pid = conn.connection.dbapi_connection.get_backend_pid()
            support_db.terminate_backend(engine, pid)

            with pytest.raises(exc.DBAPIError) as raised:
                leases.claim(conn, "w1", 30.0, run_id)

            assert raised.value.connection_invalidated
            assert conn.invalidated

        # db.retry_on_disconnect (the runner's claim) gets past the same fault
        calls: list[int] = []

        def claim_once_lost(conn):
            calls.append(conn.connection.dbapi_connection.get_backend_pid())
            if len(calls) == 1:
                support_db.terminate_backend(engine, calls[0])
            return leases.claim(conn, "w1", 30.0, run_id)

        claim = db.retry_on_disconnect(engine, claim_once_lost)

        assert len(calls) == 2 and calls[0] != calls[1]
        assert claim is not None and claim.run_id == run_id and claim.lease_epoch == 1
    finally:
        engine.dispose()


def test_a_refused_statement_keeps_its_sqlstate_and_its_connection(engine, project):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    with engine.connect() as conn:
        claim = leases.claim(conn, "w1", 30.0, run_id)
        assert claim is not None
        pid = conn.connection.dbapi_connection.get_backend_pid()

        # a journal entry the server cannot store: NUL is not allowed in jsonb text
        with pytest.raises(exc.DBAPIError) as raised:
            segments.record_step(conn, claim, [{"step": "one", "output": "\u0000"}], "two")

        assert raised.value.orig.pgcode == "22P05"  # untranslatable character
        assert not raised.value.connection_invalidated
        assert not conn.invalidated
        # the same session goes on: the refused statement wrote nothing, the next one lands
        steering = segments.record_step(conn, claim, [{"step": "one", "output": 1}], "two")
        assert steering is not None and not steering.cancelling
        assert conn.connection.dbapi_connection.get_backend_pid() == pid
        journal = conn.execute(
            text("SELECT saga_steps FROM awooop_run_state WHERE run_id = :r"), {"r": run_id}
        ).scalar_one()
        assert [(e["step"], e["output"]) for e in journal] == [("one", 1)]


def test_rows_are_named_by_their_columns_on_the_dbapi_path(engine):
    statement = PreparedStatement(
        "awooop_test_row_names", "SELECT CAST(:n AS int) AS run_count, 'x' AS status, 1"
    )
    with engine.connect() as conn:
        assert not conn.dispatch.before_cursor_execute  # the DBAPI path, not SQLAlchemy's
        row = statement.execute(conn, {"n": 3}).first()
        again = statement.execute(conn, {"n": 4}).first()  # prepared now: EXECUTE alone

    assert (row.run_count, row.status, row[2]) == (3, "x", 1)
    assert row._fields == ("run_count", "status", "_2")  # "?column?" is not a name: renamed
    assert again.run_count == 4 and type(again) is type(row)
