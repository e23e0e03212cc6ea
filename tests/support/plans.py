"""Reading the plans PostgreSQL makes for the store's statements, and the statistics it
makes them from.

Stale statistics are the case that hides a bad plan: the runs table analyzed at a quiet
moment, then many runs starting or waiting before autovacuum analyzes it again. The planner
then believes a status is rare, and an index on ``status`` looks cheaper than the primary
key for a statement that names its run. :func:`freeze_statistics` and :func:`copy_run` make
that case; :func:`generic_plan` reads the plan a session keeps for a prepared statement,
:func:`custom_plan` the one made for a statement sent with its values (a ``text()``
statement, as psycopg2 sends it)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable

from sqlalchemy import Connection, Engine, TextClause, text

from awooop.store.prepared import PreparedStatement
from tests.support import runs

_COPIES = text(
    """
    INSERT INTO awooop_run_state
    SELECT (jsonb_populate_record(r, jsonb_build_object(
        'run_id', gen_random_uuid(), 'worker_id', 'other-' || n, 'status', s)
        || CAST(:columns AS jsonb))).*
    FROM awooop_run_state r, generate_series(1, :copies) AS n,
         unnest(CAST(:statuses AS text[])) AS s
    WHERE r.run_id = :run_id
    """
)


def copy_run(
    engine: Engine, run_id: uuid.UUID, statuses: Iterable[str], copies: int, **columns: str
) -> None:
    """``copies`` runs in each of ``statuses``, each a copy of ``run_id`` with its own id
    and worker, and ``columns`` set (the status and these differ, nothing else)."""
    values = {"run_id": run_id, "copies": copies, "statuses": list(statuses)}
    with engine.begin() as conn:
        conn.execute(_COPIES, {**values, "columns": json.dumps(columns)})


def finished_runs(engine: Engine, project_id: str, n: int) -> uuid.UUID:
    """``n`` finished runs of ``project_id`` and no unfinished one (the history a quiet moment
    sees); the id of one of them, a template for :func:`copy_run`."""
    admitted = runs.admit(engine, project_id)
    copy_run(engine, admitted, ["COMPLETED"], n, saga_status="COMPLETED")
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM awooop_run_state WHERE run_id = :r"), {"r": admitted})
        return conn.execute(text("SELECT run_id FROM awooop_run_state LIMIT 1")).scalar_one()


def freeze_statistics(engine: Engine, tables: Iterable[str] = ("awooop_run_state",)) -> None:
    """Analyze ``tables`` now and keep those statistics: autovacuum is off for them (in this
    test's database only)."""
    with engine.begin() as conn:
        for table in tables:
            conn.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))
            conn.execute(text(f"ANALYZE {table}"))


def generic_plan(conn: Connection, statement: PreparedStatement, values: dict) -> str:
    """The plan a session keeps for the prepared ``statement`` once it has prepared it (a
    generic one, its values as parameters), for ``values``. The engine commits each
    statement by itself, so the planner setting is the session's, and reset after."""
    conn.execute(text("SET plan_cache_mode = force_generic_plan"))
    try:
        arguments = ", ".join(f":{name}" for name in statement.parameters)
        explain = text(f"EXPLAIN EXECUTE {statement.name}({arguments})")
        return "\n".join(conn.execute(explain, values).scalars())
    finally:
        conn.execute(text("RESET plan_cache_mode"))


def custom_plan(conn: Connection, statement: TextClause, values: dict) -> str:
    """The plan made for ``statement`` sent with ``values`` (not executed)."""
    return "\n".join(conn.execute(text(f"EXPLAIN {statement.text}"), values).scalars())
