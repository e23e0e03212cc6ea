"""A hot statement's cached plan must not come from the moment its tables were tiny.

PostgreSQL plans an ``EXECUTE`` of a prepared statement with the statistics of that moment and,
after five executions, may keep one generic plan for the connection's life. On a fresh
database (or tables that were just truncated, or analyzed while empty) that plan scans the
tables sequentially — cheap while they are empty — and keeps doing so as they grow, until an
ANALYZE happens to invalidate it: measured under ``make bench``, the web's connections then
read tens of millions of rows per minute and admission ran at half its speed. PostgreSQL
caches the plans of its own foreign-key checks the same way. A connection drops its session's
cached plans every ``REPLAN_AFTER_SECONDS``, and the plans follow the tables.
"""

from __future__ import annotations

import pytest
from sqlalchemy import event, exc, text

from awooop import db
from awooop.engine import lease, runner
from awooop.store import admission, leases, prepared
from awooop.workflows import registry
from tests.support import runs as test_runs


def _plan(conn, project_id: str) -> str:
    """The plan the connection's cached ``awooop_admit`` uses for an event of a new key."""
    new = test_runs.new_run(project_id, registry.latest("noop-3"))
    params = {
        "project_id": new.project_id,
        "channel_type": new.channel_type,
        "provider_event_id": new.provider_event_id,
        "request_digest": new.request_digest,
        "run_id": "00000000-0000-0000-0000-000000000001",
        "dedupe_id": "00000000-0000-0000-0000-000000000002",
        "workflow_name": new.workflow_name,
        "workflow_version": new.workflow_version,
        "workflow_digest": new.workflow_digest,
        "input": "{}",
        "max_attempts": new.max_attempts,
        "traceparent": None,
        "deadline": None,
        "correlation_key": None,
    }
    stmt = admission._ADMIT
    values = tuple(params[p] for p in stmt._order)
    execute = stmt._execute
    rows = conn.exec_driver_sql(f"EXPLAIN {execute}", values).scalars().all()
    return "\n".join(rows)


def test_an_admission_planned_on_tiny_tables_uses_the_indexes_once_they_have_grown(
    engine, project, monkeypatch
):
    now = [1000.0]
    monkeypatch.setattr(prepared, "_clock", lambda: now[0])
    with engine.connect() as conn:
        conn.execute(text("ANALYZE awooop_channel_event_dedupe, awooop_run_state"))
        # This connection prepares the statement and runs it past PostgreSQL's five custom
        # plans while the tables hold a handful of rows: it keeps a plan from then on.
        _admit(conn, project, 8)
        assert "Seq Scan on awooop_channel_event_dedupe" in _plan(conn, project["project_id"])
        # The tables grow (no ANALYZE, as between two autovacuum passes).
        test_runs.admit_many(engine, project["project_id"], 3000)
        now[0] += prepared.REPLAN_AFTER_SECONDS
        _admit(conn, project, 8)  # made again, and past five custom plans again

        plan = _plan(conn, project["project_id"])

    assert "Seq Scan on awooop_channel_event_dedupe" not in plan, plan
    assert "Seq Scan on awooop_run_state" not in plan, plan
    assert "Index Scan using uq_awooop_channel_event_dedupe_event_key" in plan, plan


def _run_state_scans_of_a_history_row(conn, run_id) -> tuple[int, int]:
    """Sequential and index scans of ``awooop_run_state`` made by inserting one history row of
    ``run_id``: only the foreign-key check PostgreSQL makes for it reads that table."""

    def scans():
        return conn.exec_driver_sql(
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables "
            "WHERE relname = 'awooop_run_state'"
        ).one()

    before = scans()
    conn.exec_driver_sql(
        "INSERT INTO awooop_run_event (run_id, kind, trigger) VALUES (%s, 'test', 'test')",
        (str(run_id),),
    )
    after = scans()
    conn.rollback()
    return after[0] - before[0], after[1] - before[1]


def test_a_foreign_key_check_planned_on_tiny_tables_uses_the_primary_key_once_they_have_grown(
    engine, project, monkeypatch
):
    """PostgreSQL caches the plans of its own foreign-key checks per connection, like a
    prepared statement's: the history row an admission inserts checks its run that way."""
    now = [1000.0]
    monkeypatch.setattr(prepared, "_clock", lambda: now[0])
    run_id = test_runs.admit(engine, project["project_id"])
    with engine.connect() as conn:
        conn.execute(text("ANALYZE awooop_run_state, awooop_run_event"))
        conn.commit()
        # Past the check's five custom plans while the tables hold a handful of rows.
        _admit(conn, project, 8)
        conn.commit()
        assert _run_state_scans_of_a_history_row(conn, run_id) == (1, 0)
        # The tables grow (no ANALYZE, as between two autovacuum passes).
        test_runs.admit_many(engine, project["project_id"], 3000)
        now[0] += prepared.REPLAN_AFTER_SECONDS
        _admit(conn, project, 1)
        conn.commit()

        assert _run_state_scans_of_a_history_row(conn, run_id) == (0, 1)


def test_a_statement_whose_execution_failed_is_made_again_on_the_same_connection(
    engine, project, monkeypatch
):
    """A PREPARE outlives a failed transaction: the remake must not trip over it."""
    now = [1000.0]
    monkeypatch.setattr(prepared, "_clock", lambda: now[0])
    divide = prepared.PreparedStatement("awooop_test_divide", "SELECT 1 / :d AS q")
    with engine.connect() as conn:
        with pytest.raises(exc.DBAPIError):
            divide.execute(conn, {"d": 0})
        assert divide.execute(conn, {"d": 1}).scalar_one() == 1
        now[0] += prepared.REPLAN_AFTER_SECONDS
        assert divide.execute(conn, {"d": 1}).scalar_one() == 1
        made = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_prepared_statements WHERE name = 'awooop_test_divide'"
        ).scalar_one()
    assert made == 1


def _admit(conn, project, n: int) -> None:
    for _ in range(n):
        admission.admit(conn, test_runs.new_run(project["project_id"], registry.latest("noop-3")))
    assert "awooop_admit" in conn.connection.info["awooop_prepared"]


def test_a_connection_drops_its_cached_plans_soon_then_less_often(engine, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(prepared, "_clock", lambda: now[0])
    one = prepared.PreparedStatement("awooop_test_one", "SELECT CAST(:x AS int) AS one")
    sent: list[str] = []
    discarded_after = []
    with engine.connect() as conn:
        # A listener makes the statements go through SQLAlchemy, where it sees them.
        event.listen(conn, "before_cursor_execute", lambda c, cur, sql, *a: sent.append(sql))
        one.execute(conn, {"x": 1})
        for _ in range(120):  # 30 s in steps of a quarter of a second
            now[0] += 0.25
            assert one.execute(conn, {"x": 1}).scalar_one() == 1
            if sent[-1].startswith("DISCARD PLANS; EXECUTE awooop_test_one"):
                discarded_after.append(now[0] - 1000.0)
        made = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_prepared_statements WHERE name = 'awooop_test_one'"
        ).scalar_one()

    assert discarded_after == [0.5, 1.5, 3.5, 7.5, 15.5, 25.5]
    assert sum("PREPARE awooop_test_one" in sql for sql in sent) == 1
    assert made == 1


def test_behind_a_pooler_the_plain_statements_carry_the_discard(engine, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(prepared, "_clock", lambda: now[0])
    one = prepared.PreparedStatement("awooop_test_one", "SELECT CAST(:x AS int) AS one")
    sent: list[str] = []
    with engine.connect().execution_options(**{prepared.PREPARE: False}) as conn:
        event.listen(conn, "before_cursor_execute", lambda c, cur, sql, *a: sent.append(sql))
        one.execute(conn, {"x": 1})
        now[0] += prepared.FIRST_REPLAN_SECONDS
        assert one.execute(conn, {"x": 2}).scalar_one() == 2

    assert sent == [
        "SELECT CAST(%(x)s AS int) AS one",
        "DISCARD PLANS; SELECT CAST(%(x)s AS int) AS one",
    ]


def test_the_hot_statements_are_not_planned_again_at_every_execution(
    database_url, settings, project, monkeypatch
):
    """PostgreSQL plans a prepared statement's first five executions for their parameters,
    then keeps its generic plan unless those custom plans looked cheaper: a statement whose
    parameters fold part of it away (a ``CASE`` on one of them) would be planned again at
    every ``EXECUTE``, and preparing it would save nothing. Run eight times each on one
    connection, every prepared statement of admission, claims, step records, finishes and
    lease renewals is planned for its parameters at most five times."""
    monkeypatch.setattr(prepared, "_clock", lambda: 1000.0)  # no DISCARD PLANS meanwhile
    project_id = project["project_id"]
    engine = db.make_engine(database_url, pool_size=1, role=db.WORKER, settings=settings)
    try:
        with engine.connect() as conn:
            for _ in range(8):
                new = test_runs.new_run(project_id, registry.latest("noop-3"))
                assert admission.admit(conn, new, max_active_runs=100).created
                claim = leases.claim(conn, "w-plans", 60.0)
                assert claim is not None and leases.renew(conn, claim, 60.0)
                assert leases.release(conn, claim, 0.0, "test")
        for run_id in [*test_runs.admit_many(engine, project_id, 8), *[None] * 8]:
            assert runner.execute(engine, settings, run_id) == runner.Outcome.COMPLETED
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT name, custom_plans FROM pg_prepared_statements")
            custom = {name: n for name, n in rows}
    finally:
        lease.stop_keeper()
        engine.dispose()

    made = {
        "awooop_admit",
        "awooop_admit_within_quota",
        "awooop_claim_by_id",
        "awooop_claim_oldest",
        "awooop_renew",
        "awooop_record_step",
        "awooop_finish",
    }
    assert set(custom) == made
    assert {name for name, n in custom.items() if n > 5} == set()
