"""A worker's fenced writes against a database that hiccups: every worker write is a
compare-and-set, so a write whose reply was lost after it committed is retried and applied
once; a write the database keeps refusing hands the run back at once."""

from __future__ import annotations

import dataclasses

import psycopg2
import pytest
from sqlalchemy import event, exc

from awooop.engine import runner
from tests.support import db
from tests.support import runs as test_runs


@pytest.fixture
def quick_retries(settings):
    return dataclasses.replace(settings, write_retry_base_seconds=0.01, write_retries=3)


def _fail(engine, needle: str, times: int, after_commit: bool) -> list[int]:
    """Make the next ``times`` statements containing ``needle`` fail like a connection the
    server closed — after they committed (the reply was lost) or before they ran."""
    failures = [0]

    def fail(conn, cursor, statement, parameters, context, executemany):
        if needle in statement and failures[0] < times:
            failures[0] += 1
            raise exc.OperationalError(
                statement,
                parameters,
                psycopg2.OperationalError("server closed the connection unexpectedly"),
                connection_invalidated=True,
            )

    event.listen(engine, "after_cursor_execute" if after_commit else "before_cursor_execute", fail)
    return failures


@pytest.mark.parametrize("statement", ["EXECUTE awooop_record_step", "EXECUTE awooop_finish"])
def test_a_write_whose_reply_was_lost_after_it_committed_is_applied_once(
    engine, project, quick_retries, statement
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    failures = _fail(engine, statement, times=1, after_commit=True)

    assert runner.execute(engine, quick_retries, run_id) == runner.Outcome.COMPLETED

    assert failures == [1]
    row = db.run(engine, run_id)
    assert [e["step"] for e in row["saga_steps"]] == ["one", "two", "three"]
    finishes = [e for e in db.events(engine, run_id) if e["to_status"] == "COMPLETED"]
    assert len(finishes) == 1


def test_a_write_the_database_keeps_refusing_hands_the_run_back_at_once(
    engine, project, quick_retries
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    failures = _fail(engine, "EXECUTE awooop_finish", times=4, after_commit=False)

    assert runner.execute(engine, quick_retries, run_id) == runner.Outcome.RELEASED

    assert failures == [4]  # the first try and three retries
    row = db.run(engine, run_id)
    assert (row["status"], row["worker_id"], row["lease_until"]) == ("PENDING", None, None)
    # claimable now, not after the lease and the reaper: the next worker finishes it
    assert runner.execute(engine, quick_retries, run_id) == runner.Outcome.COMPLETED
    assert [e["step"] for e in db.run(engine, run_id)["saga_steps"]] == ["one", "two", "three"]


def test_a_write_the_database_refuses_for_good_escalates_the_run_at_once(
    engine, project, quick_retries
):
    run_id = test_runs.admit(engine, project["project_id"], "noop-3")
    refused = [0]

    def refuse(conn, cursor, statement, parameters, context, executemany):
        # A real non-transient error from PostgreSQL in place of the run's last statement
        if "EXECUTE awooop_finish" in statement and not refused[0]:
            refused[0] += 1
            return "SELECT 1 / 0", None
        return statement, parameters

    event.listen(engine, "before_cursor_execute", refuse, retval=True)

    assert runner.execute(engine, quick_retries, run_id) == runner.Outcome.ESCALATED

    assert refused == [1]  # tried once: a refusal is not retried
    row = db.run(engine, run_id)
    assert (row["status"], row["saga_status"], row["failure_code"]) == (
        "WAITING_APPROVAL",
        "MANUAL_INTERVENTION",
        "E-RUN-002",
    )
    assert "DivisionByZero" in row["failure_reason"]
    three = [e for e in row["saga_steps"] if e.get("step") == "three"]
    assert [e["status"] for e in three] == ["HALTED"]
    assert row["attempt_count"] == 0
